package fsm

import "github.com/megaflow/megaflow/internal/wire"

// interner makes task specs share equal strings and equal resource
// messages, which keeps a typical task's row small: the image, the program,
// the queue type and the resources are usually the same for every task of a
// rollout graph. It rewrites specs in place, so only specs just decoded and
// not yet in the table (a submit chunk, a snapshot batch) may go through it.
// Maps (env, node selector) keep their own strings: sharing their keys would
// mean rebuilding every map.
type interner struct {
	strs map[string]string
	res  map[resourcesKey]*wire.Resources
}

type resourcesKey struct {
	cpu, mem, gpuMem int64
	gpus             int32
	model            string
}

func newInterner() *interner {
	return &interner{strs: map[string]string{}, res: map[resourcesKey]*wire.Resources{}}
}

func (in *interner) str(s string) string {
	if s == "" {
		return s
	}
	if c, ok := in.strs[s]; ok {
		return c
	}
	in.strs[s] = s
	return s
}

func (in *interner) all(ss []string) {
	for i, s := range ss {
		ss[i] = in.str(s)
	}
}

// spec interns the fields of s that tasks of a graph tend to share.
func (in *interner) spec(s *wire.TaskSpec) {
	s.Image = in.str(s.Image)
	in.all(s.Command)
	s.Type = in.str(s.Type)
	s.Session = in.str(s.Session)
	s.WorkingDir = in.str(s.WorkingDir)
	s.Network = in.str(s.Network)
	in.all(s.OutputPaths)
	in.all(s.UsesServices)
	in.all(s.Capabilities)
	if r := s.Resources; r != nil {
		k := resourcesKey{r.CpuMillis, r.MemoryBytes, r.GpuMemoryBytes, r.Gpus, r.GpuModel}
		if c, ok := in.res[k]; ok {
			s.Resources = c
		} else {
			r.GpuModel = in.str(r.GpuModel)
			in.res[k] = r
		}
	}
}
