package head

import (
	"context"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/gossip"
)

// ensureRules moves the cluster to the newest rules version every voter can
// apply (rulesCommand): the leader loop calls it after its barrier and
// every tick, next to ensureClusterID, and proposes what rulesCommand
// returns. Cheap once the table is at this build's fsm.RulesCurrent: it
// then reads neither the Raft configuration nor gossip.
func (h *Head) ensureRules(ctx context.Context) {
	view := h.fsm.View()
	cur := view.Rules()
	if cur >= fsm.RulesCurrent {
		return
	}
	voters, err := h.voterIDs()
	if err != nil {
		return
	}
	cmd := rulesCommand(view, voters, h.voterRules)
	if cmd == nil {
		return
	}
	res, err := h.prop.propose(ctx, fsm.OpSetRules, cmd)
	if err != nil {
		if ctx.Err() == nil {
			h.logger.Warn("committing rules version failed; retrying", "rules", cmd.GetValue(), "err", err)
		}
		return
	}
	h.logger.Info("rules version committed", "from", cur, "to", res)
}

// voterIDs returns the ids of the Raft configuration's voters.
func (h *Head) voterIDs() ([]string, error) {
	servers, err := h.node.Servers()
	if err != nil {
		return nil, err
	}
	voters := make([]string, 0, len(servers))
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	return voters, nil
}

// voterRules is the highest rules version head id applies: this build's
// for this head, what gossip says for another; false when gossip does not
// see it alive.
func (h *Head) voterRules(id string) (uint64, bool) {
	if id == h.cfg.NodeID {
		return fsm.RulesCurrent, true
	}
	m, found := h.headMember(id)
	if !found || m.Status != gossip.StatusAlive {
		return 0, false
	}
	return advertisedRules(m.Meta)
}

// votersApply returns nil when every voter applies rules version v, else
// an error naming one that does not (or whose version is unknown).
func (h *Head) votersApply(v uint64) error {
	voters, err := h.voterIDs()
	if err != nil {
		return h.raftError(err)
	}
	for _, id := range voters {
		r, known := h.voterRules(id)
		switch {
		case !known:
			return errs.New(errs.Unavailable, "head %s's rules version is not known (is it up?); rules %d needs every head to apply it: retry once it is up", id, v)
		case r < v:
			return errs.New(errs.FailedPrecondition, "head %s applies rules up to %d, and this needs rules %d: upgrade it first", id, r, v)
		}
	}
	return nil
}

// advertisedRules reads the rules version a head advertises in its gossip
// metadata (fsm.MetaKeyRules); false when it advertises none (a build from
// before rules versions applies rules 0 only) or garbage.
func advertisedRules(m gossip.Meta) (uint64, bool) {
	v, err := strconv.ParseUint(m.Extra[fsm.MetaKeyRules], 10, 64)
	return v, err == nil
}

// rulesToCommit decides the rules version the leader commits next: the
// highest every voter can apply (canApply: the version a voter advertises,
// false when it is not known), at most fsm.RulesCurrent; ok is false when
// that is not above cur (nothing to do) or a voter's version is unknown (a
// voter down or not yet gossiped keeps the cluster where it is: it might
// be an older build).
func rulesToCommit(cur uint64, voters []string, canApply func(voterID string) (uint64, bool)) (target uint64, ok bool) {
	target = fsm.RulesCurrent
	for _, id := range voters {
		v, known := canApply(id)
		if !known {
			return 0, false
		}
		target = min(target, v)
	}
	return target, target > cur
}
