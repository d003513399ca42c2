package gossip

import "github.com/hashicorp/memberlist"

// delegate receives memberlist's callbacks. It is separate from Gossip so
// that Gossip's method set stays the package's API. memberlist calls it from
// its own goroutines, with its node lock held: it must not block or call
// back into memberlist.
type delegate struct{ g *Gossip }

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
)

// NodeMeta returns the encoded local Meta, at most limit bytes (guaranteed
// by Meta.encode, since limit is memberlist.MetaMaxSize).
func (d *delegate) NodeMeta(limit int) []byte {
	d.g.metaMu.Lock()
	defer d.g.metaMu.Unlock()
	if len(d.g.meta) > limit { // cannot happen; memberlist would panic
		return nil
	}
	return d.g.meta
}

// NotifyMsg hands a user message (SendTo) to Config.OnMessage, copied:
// memberlist reuses the buffer.
func (d *delegate) NotifyMsg(b []byte) {
	if f := d.g.cfg.OnMessage; f != nil && len(b) > 0 {
		f(append([]byte(nil), b...))
	}
}

// GetBroadcasts has no user broadcasts to add.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState has no user state for push/pull.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState ignores remote user state.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin records a member that appeared or came back.
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.g.update(EventJoin, n) }

// NotifyLeave records a member that left or died; n.State says which.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.g.update(EventLeave, n) }

// NotifyUpdate records a member's new Meta.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.g.update(EventUpdate, n) }
