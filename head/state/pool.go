package state

import (
	"maps"
	"slices"
	"strings"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Pre-warm targets (persistent mode): how many warm containers of an image
// the workers matching a selector keep for a tenant's tasks, set through
// the API (OpPoolWarm) so that they survive leader changes. The leader
// sends each worker the targets that match its labels; the worker's pool
// keeps that many containers warm.

// MaxPoolSize bounds PoolTarget.size: warm containers per worker and target.
const MaxPoolSize = 64

// DefaultTenant is the tenant of a target that names none, as of a graph.
const DefaultTenant = "default"

// PoolTarget is a pre-warm target's row: a wire.PoolTarget with its tenant
// filled in and the index and time it was set. Immutable once inserted.
type PoolTarget struct {
	Target *wire.PoolTarget
}

func poolKeyOf(image, tenant string) string { return image + "\x00" + tenant }

func (p *PoolTarget) key() string { return poolKeyOf(p.Target.GetImage(), p.Target.GetTenant()) }

// CheckPoolTarget returns an InvalidArgument error naming what is wrong
// with a target: no image, a size outside [0, MaxPoolSize], negative
// resources, an empty selector key.
func CheckPoolTarget(w *wire.PoolTarget) error {
	switch {
	case w == nil:
		return errs.New(errs.InvalidArgument, "pool warm: no target")
	case w.GetImage() == "":
		return errs.New(errs.InvalidArgument, "pool warm: the image is empty; name a container image, e.g. \"python:3.12-slim\"")
	case strings.IndexFunc(w.GetImage(), func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 || len(w.GetImage()) > 512:
		return errs.New(errs.InvalidArgument, "pool warm: image %q is not an image reference (printable ASCII without spaces, at most 512 bytes)", w.GetImage())
	case w.GetSize() < 0 || w.GetSize() > MaxPoolSize:
		return errs.New(errs.InvalidArgument, "pool warm %s: size %d is outside [0, %d]; 0 removes the target", w.GetImage(), w.GetSize(), MaxPoolSize)
	case w.GetCpuMillis() < 0 || w.GetMemoryBytes() < 0:
		return errs.New(errs.InvalidArgument, "pool warm %s: cpu_millis %d or memory_bytes %d is negative; give 0 (no limit) or more",
			w.GetImage(), w.GetCpuMillis(), w.GetMemoryBytes())
	}
	for k := range w.GetWorkerSelector() {
		if k == "" {
			return errs.New(errs.InvalidArgument, "pool warm %s: worker selector has an empty label key", w.GetImage())
		}
	}
	return nil
}

// SetPoolTarget inserts or replaces the target of (image, tenant), or
// deletes it when size is 0. The FSM calls it for an OpPoolWarm. It
// returns whether a target was removed, or an InvalidArgument error
// (CheckPoolTarget) that changes nothing.
func (t *Txn) SetPoolTarget(w *wire.PoolTarget, unixNanos int64) (removed bool, err error) {
	if err := CheckPoolTarget(w); err != nil {
		return false, err
	}
	c := proto.CloneOf(w)
	if c.Tenant == "" {
		c.Tenant = DefaultTenant
	}
	c.ModifyIndex, c.UpdateUnixNanos = t.index, unixNanos
	row := &PoolTarget{Target: c}
	if c.GetSize() == 0 {
		if raw := first(t.mem, tablePools, indexID, row.key()); raw != nil {
			must(t.mem.Delete(tablePools, raw))
			return true, nil
		}
		return false, nil
	}
	must(t.mem.Insert(tablePools, row))
	return false, nil
}

// PoolTargets returns every pre-warm target, by image then tenant. The
// rows are shared: do not modify them.
func (v *View) PoolTargets() []*wire.PoolTarget {
	var out []*wire.PoolTarget
	for _, p := range collect[*PoolTarget](get(v.txn(), tablePools, indexID)) {
		out = append(out, p.Target)
	}
	return out
}

// PoolTargetsFor returns the targets whose worker selector matches labels,
// by image then tenant.
func (v *View) PoolTargetsFor(labels map[string]string) []*wire.PoolTarget {
	var out []*wire.PoolTarget
	for _, p := range v.PoolTargets() {
		if selects(labels, p.GetWorkerSelector()) {
			out = append(out, p)
		}
	}
	return out
}

func selects(labels, sel map[string]string) bool {
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if v, ok := labels[k]; !ok || v != sel[k] {
			return false
		}
	}
	return true
}

// PoolTarget adds a target row to a restore.
func (r *Restore) PoolTarget(w *wire.PoolTarget) error {
	return r.mem.Insert(tablePools, &PoolTarget{Target: w})
}
