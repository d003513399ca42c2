package gossip

import "strconv"

// Status is a member's liveness as this member sees it.
type Status uint8

// The statuses.
const (
	// StatusAlive: the member answers probes (or has not yet been found
	// unresponsive).
	StatusAlive Status = iota + 1
	// StatusSuspect is reserved and never reported by this implementation:
	// memberlist v0.7.0 has no callback for "suspect", and the node table
	// behind memberlist.Members cannot be read without a data race
	// (hashicorp/memberlist#306). A suspect member shows as alive until it
	// refutes the suspicion or is declared dead.
	StatusSuspect
	// StatusDead: the member stopped answering and did not refute the
	// suspicion in time (crash, partition, Shutdown without Leave).
	StatusDead
	// StatusLeft: the member announced its departure with Leave.
	StatusLeft
)

var statusNames = [...]string{"", "alive", "suspect", "dead", "left"}

// String returns "alive", "suspect", "dead" or "left".
func (s Status) String() string {
	if int(s) > 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Member is one member of the pool as this member sees it. It is a copy:
// callers may keep and modify it.
type Member struct {
	// Name is the member's NodeName.
	Name string
	// Addr is the member's advertised gossip "ip:port".
	Addr string
	// Meta is what the member advertises. It is the zero Meta when the
	// member's meta could not be decoded (a foreign or newer member); such a
	// member has no Role, so role filters skip it.
	Meta Meta
	// Status is the member's liveness.
	Status Status
}

// EventKind says what happened to a member.
type EventKind uint8

// The event kinds.
const (
	// EventJoin: a member appeared, or came back after being dead or left.
	EventJoin EventKind = iota + 1
	// EventUpdate: a live member changed its Meta.
	EventUpdate
	// EventLeave: a member left with Leave.
	EventLeave
	// EventDead: a member was declared dead.
	EventDead
)

var eventNames = [...]string{"", "join", "update", "leave", "dead"}

// String returns "join", "update", "leave" or "dead".
func (k EventKind) String() string {
	if int(k) > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is a change in membership, delivered on Gossip.Events. Member is the
// member's state right after the change.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Member is a copy of the member as recorded after the event.
	Member Member
}
