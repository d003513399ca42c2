package spec

import (
	"time"

	"github.com/megaflow/megaflow/internal/wire"
)

// Bounds on priorities. A task priority of 0 inherits the graph's; any other
// task or graph priority must lie in [MinPriority, MaxPriority]. Higher runs
// first within a queue.
const (
	MinPriority = -1000
	MaxPriority = 1000
)

// Well-known task types, each its own scheduling queue. The empty type is the
// default queue. Any other lowercase name (see Validate) is a custom queue.
const (
	TypeDefault = ""
	TypeTrain   = "train"
	TypeEval    = "eval"
	TypeSynth   = "synth"
)

// DefaultTenant is the tenant Normalize gives a graph that names none.
const DefaultTenant = "default"

// Limits bounds what Validate accepts. Start from DefaultLimits and change
// what the deployment needs. A zero (or negative) numeric field means its
// default, so Limits{} behaves as DefaultLimits(). Limits holds no state and
// may be shared by goroutines as long as no one modifies it.
type Limits struct {
	// MaxTasks is the most tasks one graph may hold. Default 100,000.
	MaxTasks int
	// MaxNameLen is the longest graph id, tenant, task name, session or
	// service name, in bytes. Default 128.
	MaxNameLen int
	// MaxRetries is the largest max_retries a task may ask for; the least
	// is 0. Default 100.
	MaxRetries int32
	// MaxTaskTimeout is the longest per-attempt timeout_seconds; 0 in a task
	// means no timeout. Default 7 days (604,800 seconds).
	MaxTaskTimeout time.Duration
	// MaxGraphDeadline is the longest graph deadline_seconds; 0 in a graph
	// means no deadline. Default 30 days (2,592,000 seconds).
	MaxGraphDeadline time.Duration
	// MaxEnvEntries is the most environment variables one task may set.
	// Default 256.
	MaxEnvEntries int
	// MaxEnvBytes bounds the sum over a task's environment of
	// len(key)+len(value), in bytes. Default 32 KiB.
	MaxEnvBytes int
	// MaxCommandArgs is the most elements a task's command may have,
	// the program included. Default 1,024.
	MaxCommandArgs int
	// MaxTaskSpecBytes bounds the protobuf-encoded size of one normalized
	// TaskSpec in bytes, not counting its depends_on list (a fan-in task may depend on
	// every other task of the graph; that list is bounded by MaxTasks).
	// Default 64 KiB.
	MaxTaskSpecBytes int
	// MaxGraphSpecBytes bounds the protobuf-encoded size of a whole
	// normalized GraphSpec in bytes. The head's gRPC receive limit must be at least
	// this. Default 64 MiB.
	MaxGraphSpecBytes int
	// MaxLabels is the most entries in a graph's labels and in a task's
	// node_selector, each. Default 64.
	MaxLabels int
	// MaxOutputPaths is the most output_paths one task may list. Default 64.
	MaxOutputPaths int
	// MaxWorker is the largest worker shape known: for each of CPU, memory
	// and GPUs, the largest amount any one worker offers (the maxima may
	// come from different workers). A task asking for more CPU, memory or
	// GPUs than that can never be placed and is invalid;
	// resources.gpu_memory_bytes is checked only when MaxWorker's is above
	// 0, and gpu_model is never checked. nil, or a value whose cpu_millis,
	// memory_bytes and gpus are all 0, means unknown: those checks are
	// skipped (the client library passes nil). Once known, gpus 0 means no
	// worker has a GPU, so a GPU task is invalid. Validate does not modify
	// it.
	MaxWorker *wire.Resources
}

// DefaultLimits returns the production limits, documented on each field of
// Limits, with MaxWorker unknown (nil).
func DefaultLimits() Limits {
	return Limits{
		MaxTasks:          100_000,
		MaxNameLen:        128,
		MaxRetries:        100,
		MaxTaskTimeout:    7 * 24 * time.Hour,
		MaxGraphDeadline:  30 * 24 * time.Hour,
		MaxEnvEntries:     256,
		MaxEnvBytes:       32 << 10,
		MaxCommandArgs:    1024,
		MaxTaskSpecBytes:  64 << 10,
		MaxGraphSpecBytes: 64 << 20,
		MaxLabels:         64,
		MaxOutputPaths:    64,
	}
}

// withDefaults returns l with every zero or negative numeric field replaced
// by its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	setInt := func(p *int, def int) {
		if *p <= 0 {
			*p = def
		}
	}
	setInt(&l.MaxTasks, d.MaxTasks)
	setInt(&l.MaxNameLen, d.MaxNameLen)
	setInt(&l.MaxEnvEntries, d.MaxEnvEntries)
	setInt(&l.MaxEnvBytes, d.MaxEnvBytes)
	setInt(&l.MaxCommandArgs, d.MaxCommandArgs)
	setInt(&l.MaxTaskSpecBytes, d.MaxTaskSpecBytes)
	setInt(&l.MaxGraphSpecBytes, d.MaxGraphSpecBytes)
	setInt(&l.MaxLabels, d.MaxLabels)
	setInt(&l.MaxOutputPaths, d.MaxOutputPaths)
	if l.MaxRetries <= 0 {
		l.MaxRetries = d.MaxRetries
	}
	if l.MaxTaskTimeout <= 0 {
		l.MaxTaskTimeout = d.MaxTaskTimeout
	}
	if l.MaxGraphDeadline <= 0 {
		l.MaxGraphDeadline = d.MaxGraphDeadline
	}
	return l
}
