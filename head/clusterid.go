package head

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
)

// ensureClusterID gives the cluster its id if the table holds none: the
// leader loop calls it after its barrier and every tick (cheap once set).
// It proposes clusterIDCommand, a random nonzero 64-bit id drawn from
// crypto/rand (OpSetClusterID); the FSM keeps the first one committed, so
// two leaders racing right after a bootstrap still agree. Workers learn it
// in their Welcome and label their containers with it
// (worker.LabelClusterID).
func (h *Head) ensureClusterID(ctx context.Context) {
	cmd := clusterIDCommand(h.fsm.View(), randomUint64)
	if cmd == nil {
		return
	}
	res, err := h.prop.propose(ctx, fsm.OpSetClusterID, cmd)
	if err != nil {
		if ctx.Err() == nil {
			h.logger.Warn("committing the cluster id failed; retrying", "err", err)
		}
		return
	}
	if got, ok := res.(uint64); ok {
		h.logger.Info("cluster id set", "cluster_id", state.FormatClusterID(got))
	}
}

// randomUint64 draws 64 bits from crypto/rand.
func randomUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// waitClusterID returns the cluster id as the Welcome carries it, waiting
// (at most ApplyTimeout) for the leader loop to commit it on a cluster just
// bootstrapped. Errors: Unavailable (not committed in time; the worker
// reconnects), ctx's error.
func (h *Head) waitClusterID(ctx context.Context) (string, error) {
	timeout := time.NewTimer(h.cfg.ApplyTimeout)
	defer timeout.Stop()
	for {
		changed := h.fsm.Changed()
		if id := h.fsm.View().ClusterID(); id != 0 {
			return state.FormatClusterID(id), nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			return "", errs.New(errs.Unavailable, "the cluster has no id yet (its leader has not committed one within %v); retry", h.cfg.ApplyTimeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
