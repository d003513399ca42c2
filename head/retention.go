package head

import (
	"context"
	"iter"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// LabelArtifactRetention is the graph label that sets how long the
// artifacts of a finished graph are kept, as a Go duration ("72h"),
// overriding Config.ArtifactRetention; "0" keeps them.
const LabelArtifactRetention = "megaflow.io/artifact-retention"

// expiredArtifacts returns the finished graphs among graphs whose artifacts
// have outlived their retention at now (the graph's label, else def; 0:
// kept), skipping those in done, in the order of graphs. A label that does not parse
// is ignored (def applies). It is pure.
func expiredArtifacts(graphs iter.Seq[*state.Graph], now time.Time, def time.Duration, done map[string]bool) []*state.Graph {
	var out []*state.Graph
	for g := range graphs {
		if g.State == wire.GraphState_GRAPH_STATE_RUNNING || g.FinishUnixNanos == 0 || done[g.ID] {
			continue
		}
		keep, _ := labelRetention(g.Labels, LabelArtifactRetention, def)
		if keep > 0 && now.UnixNano()-g.FinishUnixNanos > int64(keep) {
			out = append(out, g)
		}
	}
	return out
}

// labelRetention returns the retention the graph label key sets in
// labels: def when the label is absent, its Go duration ("72h"; 0 keeps)
// when it is one of 0 or more, else def and an InvalidArgument error
// naming the label and its value (submission refuses such a graph;
// checkRetentionLabels; a graph committed before that check keeps def).
func labelRetention(labels map[string]string, key string, def time.Duration) (time.Duration, error) {
	v, ok := labels[key]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return def, errs.New(errs.InvalidArgument, "label %s=%q: give a Go duration of 0 or more, such as \"72h\" or \"90m\" (\"0\" keeps it)", key, v)
	}
	return d, nil
}

// graphsWithArchive yields the live graphs of view, then the archived
// ones (their summaries as rows, shared with the archive: read only), so
// that an archived graph's artifacts still expire.
func graphsWithArchive(view *state.View) iter.Seq[*state.Graph] {
	return func(yield func(*state.Graph) bool) {
		for g := range view.Graphs() {
			if !yield(g) {
				return
			}
		}
		for g := range view.ArchivedGraphs() {
			if !yield(state.GraphFromWire(g)) {
				return
			}
		}
	}
}

// retentionLoop runs on the leader while it leads (the leader loop owns
// it): every ArtifactSweepInterval it clears the artifacts_pending flags
// whose artifacts are in the store (landPendingArtifacts) and deletes the
// artifacts of finished graphs past their retention from the store. The graphs stay in the
// table (DeleteGraph removes both). Graphs swept during this leadership
// are remembered; a new leader sweeps each once more, which deletes
// nothing.
func (h *Head) retentionLoop(ctx context.Context) {
	if h.cfg.Artifacts == nil {
		return
	}
	done := map[string]bool{}
	tick := time.NewTicker(h.cfg.ArtifactSweepInterval)
	defer tick.Stop()
	for {
		h.landPendingArtifacts(ctx)
		for _, g := range expiredArtifacts(graphsWithArchive(h.fsm.View()), h.clock.Now(), h.cfg.ArtifactRetention, done) {
			n, err := h.cfg.Artifacts.DeletePrefix(ctx, artifact.GraphPrefix(g.Tenant, g.ID))
			if err != nil {
				if ctx.Err() == nil {
					h.logger.Warn("deleting expired artifacts failed; next sweep retries", "graph", g.ID, "err", err)
				}
				break
			}
			done[g.ID] = true
			if n > 0 {
				h.logger.Info("deleted expired artifacts", "graph", g.ID, "objects", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// landPendingArtifacts clears artifacts_pending on the ended attempts
// whose manifest (uploaded last, so everything before it landed) is in
// the store although their worker's ARTIFACTS_LANDED never came: the
// worker crashed between the upload and the event (its event queue is in
// memory), or is gone. It looks only at attempts that ended at least one
// ArtifactSweepInterval ago (pendingArtifacts), so as not to race the
// worker's own event, asks the store for each manifest, and proposes
// artifactsLanded: one ARTIFACTS_LANDED per attempt found, in its
// worker's name (the table ignores a repeated one). It stops at the first
// proposal that fails; the next sweep retries.
func (h *Head) landPendingArtifacts(ctx context.Context) {
	var landed []pendingArtifact
	for _, p := range pendingArtifacts(h.fsm.View(), h.clock.Now(), h.cfg.ArtifactSweepInterval) {
		if _, err := h.cfg.Artifacts.Stat(ctx, p.Manifest); err != nil {
			continue // not landed (or the store is down): the next sweep looks again
		}
		landed = append(landed, p)
	}
	// Stamped after the store answered, as the worker's own event would be.
	for _, cmd := range artifactsLanded(landed, h.clock.Now()) {
		if _, err := h.prop.propose(ctx, fsm.OpTaskEvents, cmd); err != nil {
			if ctx.Err() == nil {
				h.logger.Warn("clearing artifacts_pending failed; next sweep retries", "worker", cmd.WorkerId, "err", err)
			}
			return
		}
		h.logger.Info("artifacts found in the store without their worker's word: artifacts_pending cleared", "worker", cmd.WorkerId, "attempts", len(cmd.Events))
	}
}
