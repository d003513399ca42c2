package worker

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/gossip"
)

// Keys of a worker's gossip Meta.Extra. Gossip is a hint (the head learns a
// worker's offer from its WorkerHello); the keys are short because Meta
// must fit memberlist's 512 bytes.
const (
	// MetaCPUMillis is the CPU capacity in millicores, decimal.
	MetaCPUMillis = "cpu"
	// MetaMemoryBytes is the memory capacity in bytes, decimal.
	MetaMemoryBytes = "mem"
	// MetaGPUs is the number of GPUs, decimal.
	MetaGPUs = "gpu"
	// MetaRuntime is the runtime's name: "docker", "process" or "fake".
	MetaRuntime = "rt"
	// MetaLabels is the worker's labels as "k=v,k=v" sorted by key; absent
	// when they do not fit (they always travel in WorkerHello).
	MetaLabels = "lb"
)

// meta is the worker's gossip Meta, with or without its labels.
func (w *Worker) meta(withLabels bool) gossip.Meta {
	extra := map[string]string{
		MetaCPUMillis:   strconv.FormatInt(w.cfg.Capacity.CPUMillis, 10),
		MetaMemoryBytes: strconv.FormatInt(w.cfg.Capacity.MemoryBytes, 10),
		MetaGPUs:        strconv.FormatInt(int64(w.cfg.Capacity.GPUs), 10),
		MetaRuntime:     w.rt.Name(),
	}
	if withLabels && len(w.cfg.Labels) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(w.cfg.Labels)) {
			parts = append(parts, k+"="+w.cfg.Labels[k])
		}
		extra[MetaLabels] = strings.Join(parts, ",")
	}
	return gossip.Meta{Role: gossip.RoleWorker, NodeID: w.cfg.NodeID, Extra: extra}
}

// newGossip binds the worker's gossip member. Labels that would make the
// Meta exceed memberlist's limit are left out of it, with a warning.
func (w *Worker) newGossip() (*gossip.Gossip, error) {
	gcfg := gossip.DefaultConfig()
	gcfg.NodeName = w.cfg.NodeID
	gcfg.BindAddr = w.cfg.GossipAddr
	// The heads seen alive in an earlier run too (gossip.SaveSeeds): a
	// join list whose heads moved still finds the cluster.
	saved := gossip.LoadSeeds(w.cfg.DataDir, w.cfg.GossipAddr)
	gcfg.Join = gossip.JoinList(w.cfg.Join, saved)
	if len(saved) > 0 {
		w.log.Info("joining the heads saved by the last run too", "join", w.cfg.Join, "saved", saved, "file", filepath.Join(w.cfg.DataDir, gossip.SeedsFile))
	}
	gcfg.Logger = w.log
	gcfg.OnMessage = w.onGossipMessage
	gcfg.SecretKey = w.cfg.GossipKey
	if w.cfg.Fast {
		gcfg.Timing = gossip.FastTiming()
	}
	gcfg.Meta = w.meta(true)
	if err := gcfg.Validate(); errors.Is(err, gossip.ErrMetaTooLarge) {
		w.log.Warn("worker labels do not fit in gossip meta; advertising them only on the stream", "labels", len(w.cfg.Labels))
		gcfg.Meta = w.meta(false)
	}
	return gossip.New(gcfg)
}

// keepSeeds records, about every second until ctx ends, the gossip
// addresses of the heads gossip sees alive in <data dir>/gossip-heads
// (gossip.SaveSeeds), for the next start's join. The worker's Run owns it.
func (w *Worker) keepSeeds(ctx context.Context) {
	seeds := gossip.LoadSeeds(w.cfg.DataDir, w.gossip.LocalAddr())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		seeds = w.gossip.SaveSeeds(w.cfg.DataDir, seeds)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
