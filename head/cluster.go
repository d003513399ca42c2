package head

import (
	"context"
	"sort"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
)

// ClusterStatus describes the Raft configuration, the leader, the term and
// the indexes as this head sees them, with each head's gossip status.
func (s *service) ClusterStatus(ctx context.Context, _ *wire.ClusterStatusRequest) (*wire.ClusterStatusResponse, error) {
	h := s.h
	st := h.node.Stats()
	leaderID, leaderAddr := h.leaderGRPC()
	out := &wire.ClusterStatusResponse{
		LeaderId: leaderID, LeaderGrpcAddr: leaderAddr, Term: st.Term, CommitIndex: st.CommitIndex,
		AppliedIndex: h.fsm.AppliedIndex(), LastLogIndex: st.LastLogIndex, RaftState: st.State,
		HeadId: h.cfg.NodeID, LastSnapshotIndex: st.LastSnapshotIndex,
		ClusterId: state.FormatClusterID(h.fsm.View().ClusterID()), Rules: h.fsm.View().Rules(), AclEnabled: h.cfg.ACL,
	}
	gossipByID := map[string]gossip.Member{}
	for _, m := range h.gossip.Members() {
		if m.Meta.Role == gossip.RoleHead {
			gossipByID[m.Meta.NodeID] = m
		}
	}
	servers, err := h.node.Servers()
	if err != nil {
		return nil, errs.ToStatus(h.raftError(err))
	}
	for _, srv := range servers {
		info := &wire.HeadInfo{Id: string(srv.ID), RaftAddr: string(srv.Address), Leader: string(srv.ID) == leaderID,
			Suffrage: suffrage(srv.Suffrage), Status: "unknown"}
		if m, ok := gossipByID[string(srv.ID)]; ok {
			info.GrpcAddr = m.Meta.GRPCAddr
			info.Status = m.Status.String()
			info.Version = m.Meta.Extra[version.MetaKey]
			info.Rules, _ = advertisedRules(m.Meta)
		}
		out.Heads = append(out.Heads, info)
	}
	sort.Slice(out.Heads, func(i, j int) bool { return out.Heads[i].Id < out.Heads[j].Id })
	return out, nil
}

func suffrage(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	}
	return "staging"
}

// RemoveHead removes a head that is gone for good from the Raft
// configuration. A head gossip still sees alive is refused: the leader would
// add it back as soon as it saw it.
func (s *service) RemoveHead(ctx context.Context, req *wire.RemoveHeadRequest) (*wire.RemoveHeadResponse, error) {
	h := s.h
	if req.HeadId == "" {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "RemoveHead: head_id is empty"))
	}
	if !h.IsLeader() {
		resp, err := forward(ctx, h.fwd, req, wire.MegaflowServiceClient.RemoveHead)
		return resp, errs.ToStatus(err)
	}
	servers, err := h.node.Servers()
	if err != nil {
		return nil, errs.ToStatus(h.raftError(err))
	}
	found := false
	var ids []string
	for _, srv := range servers {
		found = found || string(srv.ID) == req.HeadId
		ids = append(ids, string(srv.ID))
	}
	if !found {
		return nil, errs.ToStatus(errs.New(errs.NotFound, "head %q is not in the raft configuration (heads: %v)", req.HeadId, ids))
	}
	if req.HeadId == h.cfg.NodeID {
		return nil, errs.ToStatus(errs.New(errs.FailedPrecondition,
			"head %q is the leader; stop it first (a new leader is elected) and then remove it", req.HeadId))
	}
	for _, p := range h.aliveHeads() {
		if p.ID == req.HeadId {
			return nil, errs.ToStatus(errs.New(errs.FailedPrecondition,
				"head %q is still alive; stop it first, or the leader adds it back as soon as it sees it", req.HeadId))
		}
	}
	index, err := h.node.RemoveServer(ctx, req.HeadId)
	if err != nil {
		return nil, errs.ToStatus(h.raftError(err))
	}
	h.logger.Info("removed head from raft configuration", "peer", req.HeadId)
	return &wire.RemoveHeadResponse{Index: index}, nil
}
