package lease

import (
	"encoding/json"
	"fmt"
)

// A worker whose stream to the leader is down or silent renews its lease
// through gossip too: it sends a Renewal to the leader's gossip member, and
// the leader, while it leads, records it as it would a heartbeat and
// answers with an Ack to the worker's member. This is the "other route" of
// the lease: a worker cut off from the leader's gRPC port only (a firewall
// rule, a proxy that black-holes) keeps its attempts, and the leader does
// not re-queue them, as long as gossip carries the renewals both ways.

// Renewal is a worker's lease renewal sent through gossip.
type Renewal struct {
	// Worker is the worker's id; From the gossip member to answer (the
	// same, today).
	Worker string `json:"w"`
	From   string `json:"f"`
	// ID is the renewal's id (unix nanos when it was sent), as a
	// heartbeat's unix_nanos.
	ID int64 `json:"id"`
}

// Ack is the leader's answer to a Renewal.
type Ack struct {
	Worker string `json:"w"`
	ID     int64  `json:"id"`
	// LeaseMillis and MarginMillis are the lease the leader runs.
	LeaseMillis  int64 `json:"l"`
	MarginMillis int64 `json:"m"`
}

// Gossip message tags: the first byte of an encoded message.
const (
	tagRenewal = 'R'
	tagAck     = 'A'
)

// EncodeRenewal returns r as a gossip message.
func EncodeRenewal(r Renewal) []byte { return encode(tagRenewal, r) }

// EncodeAck returns a as a gossip message.
func EncodeAck(a Ack) []byte { return encode(tagAck, a) }

func encode(tag byte, v any) []byte {
	b, _ := json.Marshal(v) // plain strings and ints: cannot fail
	return append([]byte{tag}, b...)
}

// Decode parses a gossip message: exactly one of r and a is non-nil.
// Errors: a message of another kind or a malformed one.
func Decode(msg []byte) (r *Renewal, a *Ack, err error) {
	if len(msg) < 2 {
		return nil, nil, fmt.Errorf("lease: gossip message of %d bytes", len(msg))
	}
	switch msg[0] {
	case tagRenewal:
		r = new(Renewal)
		err = json.Unmarshal(msg[1:], r)
	case tagAck:
		a = new(Ack)
		err = json.Unmarshal(msg[1:], a)
	default:
		return nil, nil, fmt.Errorf("lease: gossip message with tag %q is not a lease message", msg[0])
	}
	if err != nil {
		return nil, nil, fmt.Errorf("lease: gossip message: %w", err)
	}
	return r, a, nil
}
