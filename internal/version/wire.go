package version

import "fmt"

// The worker protocol (proto/megaflow/v1/worker.proto: the stream between
// a worker and the leader). Its version rises when a change would make a
// head and a worker of two builds misunderstand each other (a message whose
// meaning changed, a field one side must not ignore); fields the other side
// may ignore do not raise it. During a rolling upgrade heads go first, so a
// head serves workers of the protocols from WireOldest to WireCurrent, and a
// worker announces the one it speaks in its hello.
const (
	// WireCurrent is the protocol this build's workers speak and the newest
	// its heads serve.
	WireCurrent uint32 = 1
	// WireOldest is the oldest protocol this build's heads serve.
	WireOldest uint32 = 1
)

// CheckWorkerWire returns nil when a head of this build serves a worker
// speaking protocol v (0: a build from before protocol versions, which
// speaks protocol 1), else an error for the worker saying which side to
// upgrade: the heads when the worker is newer, the worker when it is
// older. head and worker name them in the message (a head id and a worker
// id with its build).
func CheckWorkerWire(v uint32, head, worker string) error {
	if v == 0 {
		v = 1
	}
	switch {
	case v > WireCurrent:
		return fmt.Errorf("worker %s speaks worker protocol %d; head %s (build %s) serves protocols %d to %d: "+
			"upgrade the heads first (a rolling upgrade upgrades every head before the workers)", worker, v, head, Get().Short(), WireOldest, WireCurrent)
	case v < WireOldest:
		return fmt.Errorf("worker %s speaks worker protocol %d; head %s (build %s) serves protocols %d to %d: "+
			"upgrade the worker to this release or the one before it", worker, v, head, Get().Short(), WireOldest, WireCurrent)
	}
	return nil
}
