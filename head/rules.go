package head

import (
	"context"
	"strconv"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/gossip"
)

// ensureRules moves the cluster to the newest rules version every voter can
// apply (rulesToCommit): the leader loop calls it after its barrier and
// every tick, next to ensureClusterID. Cheap once the table is at this
// build's fsm.RulesCurrent.
func (h *Head) ensureRules(ctx context.Context) {
	cur := h.fsm.View().Rules()
	if cur >= fsm.RulesCurrent {
		return
	}
	servers, err := h.node.Servers()
	if err != nil {
		return
	}
	voters := make([]string, 0, len(servers))
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	target, ok := rulesToCommit(cur, voters, func(id string) (uint64, bool) {
		if id == h.cfg.NodeID {
			return fsm.RulesCurrent, true
		}
		m, found := h.headMember(id)
		if !found || m.Status != gossip.StatusAlive {
			return 0, false
		}
		return advertisedRules(m.Meta)
	})
	if !ok {
		return
	}
	res, _, err := h.apply(ctx, fsm.OpSetRules, wrapperspb.UInt64(target))
	if err != nil {
		if ctx.Err() == nil {
			h.logger.Warn("committing rules version failed; retrying", "rules", target, "err", err)
		}
		return
	}
	h.logger.Info("rules version committed", "from", cur, "to", res)
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
