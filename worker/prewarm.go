package worker

import (
	"context"
	"maps"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Pre-warm targets (PoolWarm through the API): the leader sends the worker
// every target matching its labels (HeadMessage.pool_targets), and the pool
// keeps that many warm containers of each target's key, whatever PoolMin
// says, and lets the key grow to at least that many however small PoolMax
// is. A target's key is the one a persistent task of the target's image,
// tenant, CPU and memory (and defaults otherwise) gets, so such tasks use
// the warm containers at once.

// minLocked is how many warm containers key keeps: PoolMin or its target.
// p.mu is held.
func (p *pool) minLocked(key poolKey) int { return max(p.w.cfg.PoolMin, p.targets[key]) }

// maxLocked caps key's containers: PoolMax or its target. p.mu is held.
func (p *pool) maxLocked(key poolKey) int { return max(p.w.cfg.PoolMax, p.targets[key]) }

func (p *pool) maxOf(key poolKey) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxLocked(key)
}

// targetKey returns the pool key and container template of a target: those
// of a persistent task with the target's image, tenant and resources under
// the tenant's admission policy the leader attached (its confinement is in
// the key).
func (w *Worker) targetKey(t *wire.PoolTarget) (poolKey, contract.Spec, error) {
	a := &wire.Assignment{Tenant: t.GetTenant(), Spec: &wire.TaskSpec{Image: t.GetImage(),
		Resources: &wire.Resources{CpuMillis: t.GetCpuMillis(), MemoryBytes: t.GetMemoryBytes()},
		Mode:      wire.ExecutionMode_EXECUTION_MODE_PERSISTENT},
		AdmissionPolicy: t.GetAdmissionPolicy(), AdmissionSource: t.GetAdmissionSource()}
	spec, err := w.containerSpec(a, attempt.Key{TaskID: "prewarm/" + t.GetImage(), Attempt: 1}, time.Time{}, nil)
	if err != nil {
		return poolKey{}, contract.Spec{}, err
	}
	return keyOf(a.GetTenant(), spec), spec, nil
}

// setPoolTargets replaces the pre-warm targets with ts and starts the
// containers missing at once (the stream goroutine calls it). Targets no
// longer listed fall back to PoolMin: their idle containers go after
// PoolIdle. A worker whose runtime cannot exec (no pool) logs and ignores
// them.
func (w *Worker) setPoolTargets(ctx context.Context, ts []*wire.PoolTarget) {
	if w.pool == nil {
		if len(ts) > 0 {
			w.log.Warn("pre-warm targets ignored: this worker's runtime has no warm containers (no exec)", "runtime", w.rt.Name(), "targets", len(ts))
		}
		return
	}
	p := w.pool
	targets := map[poolKey]int{}
	tmpls := map[poolKey]contract.Spec{}
	for _, t := range ts {
		key, spec, err := w.targetKey(t)
		if err != nil {
			w.log.Warn("pre-warm target ignored", "image", t.GetImage(), "err", err)
			continue
		}
		targets[key] = int(t.GetSize())
		tmpls[key] = spec
	}
	p.mu.Lock()
	for key := range targets {
		if p.keys[key] == nil {
			p.keys[key] = &keyPool{all: map[string]*warm{}, tmpl: tmpls[key]}
		}
	}
	changed := !maps.Equal(p.targets, targets)
	p.targets = targets
	if changed {
		p.broadcastLocked() // a raised target is room for a waiting acquire to create
	}
	p.mu.Unlock()
	if changed {
		w.log.Info("pre-warm targets set", "targets", len(targets))
		p.tick(ctx)
	}
}
