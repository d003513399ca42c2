package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/memberlist"
)

// Role says what a member of the gossip pool is.
type Role string

// The roles. A pool holds the three heads and every worker.
const (
	// RoleHead is a head: a Raft voter that serves the gRPC API.
	RoleHead Role = "head"
	// RoleWorker is a worker daemon that runs tasks.
	RoleWorker Role = "worker"
)

// Valid reports whether r is one of the defined roles.
func (r Role) Valid() bool { return r == RoleHead || r == RoleWorker }

// MaxMetaSize is the largest encoded Meta memberlist can carry, in bytes
// (memberlist.MetaMaxSize).
const MaxMetaSize = memberlist.MetaMaxSize

// ErrMetaTooLarge is returned (wrapped, with the actual size) by
// Config.Validate, New and UpdateMeta when a Meta encodes to more than
// MaxMetaSize bytes. Test for it with errors.Is.
var ErrMetaTooLarge = errors.New("gossip meta too large")

// Meta is what a member advertises about itself to the whole pool. It travels
// in every memberlist alive message, so it is small: roles and addresses, and
// a few free-form entries in Extra (workers put capacity and labels there).
// The encoded form (compact JSON with one- or two-letter keys) must fit in
// MaxMetaSize bytes, less 10 bytes kept for the leave announcement.
type Meta struct {
	// Role is RoleHead or RoleWorker.
	Role Role `json:"r"`
	// NodeID is the stable node id: the Raft server id for heads, the worker
	// id for workers.
	NodeID string `json:"id,omitempty"`
	// RaftAddr is the Raft transport's advertised "host:port" (heads only).
	RaftAddr string `json:"ra,omitempty"`
	// GRPCAddr is the advertised gRPC "host:port".
	GRPCAddr string `json:"ga,omitempty"`
	// Extra holds free-form entries. Keep keys and values short.
	Extra map[string]string `json:"x,omitempty"`
}

// Clone returns a deep copy of m, so that the copy's Extra can be changed
// without touching m's.
func (m Meta) Clone() Meta {
	m.Extra = maps.Clone(m.Extra)
	return m
}

// wireMeta is Meta as it travels: Leaving is set by Gossip.Leave just
// before the leave broadcast, so that the others can tell a member that left
// from one that died (memberlist's callbacks do not say which).
type wireMeta struct {
	Meta
	Leaving bool `json:"lv,omitempty"`
}

// leavingOverhead is what Leaving adds to the encoded form; encode keeps room
// for it so that Leave never produces a Meta memberlist rejects.
const leavingOverhead = len(`,"lv":true`)

// encode checks the role and size and returns the encoded form.
func (m Meta) encode(leaving bool) ([]byte, error) {
	if !m.Role.Valid() {
		return nil, fmt.Errorf("Meta.Role %q: must be %q or %q", m.Role, RoleHead, RoleWorker)
	}
	b, err := json.Marshal(wireMeta{Meta: m, Leaving: leaving})
	if err != nil {
		return nil, fmt.Errorf("encode Meta: %w", err)
	}
	size := len(b)
	if !leaving {
		size += leavingOverhead
	}
	if size > MaxMetaSize {
		return nil, fmt.Errorf("Meta encodes to %d bytes, more than the %d memberlist carries (shorten Extra): %w",
			size, MaxMetaSize, ErrMetaTooLarge)
	}
	return b, nil
}

// decodeMeta parses the bytes a member advertised and reports whether it
// announced it is leaving. Unknown JSON keys are ignored so that newer
// members can add fields.
func decodeMeta(b []byte) (Meta, bool, error) {
	if len(b) == 0 {
		return Meta{}, false, errors.New("empty meta")
	}
	var w wireMeta
	if err := json.Unmarshal(b, &w); err != nil {
		return Meta{}, false, fmt.Errorf("decode meta: %w", err)
	}
	return w.Meta, w.Leaving, nil
}
