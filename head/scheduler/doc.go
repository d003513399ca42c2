// Package scheduler owns placement: which queued task goes to which worker,
// with which GPUs, in one scheduling round. It is a pure function,
//
//	plan := scheduler.Place(scheduler.Input{Workers: ws, Tasks: ts, Policy: p, Seed: s})
//
// of its input: no clock, no randomness but the seed, no I/O, no goroutines,
// maps walked in sorted order. The same Input gives the same Plan on every
// machine, whatever the order of Workers and Tasks. Place does not modify
// its Input.
//
// Only the head leader imports it. Its scheduling loop adapts a snapshot of
// the task table (alive workers with what is allocated on them and their
// GPU devices, QUEUED tasks, running tasks per queue, tenant usage) into an
// Input, calls Place, and hands the Plan to the plan verifier, which
// re-checks every placement against the newest state and proposes one Raft
// command. Nothing here imports the state store, Raft or gRPC; the package
// links the standard library and internal/resources only (a test checks).
//
// # A round
//
// Tasks are grouped by queue (Task.Queue: "", "train", "eval", "synth" or
// any other name). Within a queue, higher priority goes first, then lower
// QueueSeq (FIFO). Queues take turns by weighted fair share: the next task
// comes from the queue whose running tasks (Input.Running) plus turns this
// round, divided by its weight (Policy, 1 by default), is lowest. So a
// flood of one type cannot starve another, within a round and across
// rounds. Each task is considered once, in that interleaved order:
//
//  1. Admission: Input.Admit (a hook for limits kept elsewhere), the cluster
//     limit (Input.Cluster) and the tenant's quota (Input.Quotas), counting
//     what this round already placed.
//  2. Fit: a worker fits if its labels match the node selector exactly, its
//     free CPU and memory (capacity - allocated - held, see below) cover the
//     request, it has enough free GPUs whose model contains the requested
//     model (case-insensitive) and whose memory is at least the requested
//     per-GPU memory, and it has a container start slot (StartsInFlight
//     plus this round's placements below MaxConcurrentStarts, when set).
//  3. Choice among the fitting workers, lexicographically: workers without
//     GPUs first for a task asking for none (GPU workers are kept for GPU
//     tasks); the queue's strategy score, from the mean over CPU, memory
//     and GPUs of the fraction allocated after placement (lowest first for
//     Spread, highest for BinPack), plus Policy.ImageLocalityBonus for a
//     worker holding the task's image (a weighted bonus; zero makes image
//     locality a pure tie-breaker); holding the image; a hash of the seed
//     and the worker id; the worker id. GPUs are taken smallest memory
//     first, then by UUID.
//
// # Head of line
//
// A task that fits nowhere is skipped and the round goes on: a large task
// never blocks the smaller ones behind it. So that it is not starved by
// them either, the first such tasks of each queue (Policy.Reservations, one
// by default) hold a worker: of those that could run them, the one lacking
// the least of their request at the start of the round. The holder's
// request is set aside there: other tasks may use only what exceeds it.
// Exempt are tasks ahead of the holder in its own queue and tasks at least
// as large in every dimension (they need as big a piece and the round
// order decides); never exempt is a task asking for no GPU from a GPU
// task's hold, so CPU-only tasks cannot fill the CPUs and memory of the GPU
// worker a GPU task waits for.
//
// The round runs in two passes. The first finds the waiting tasks and the
// workers they hold; if a task bound by a hold was placed on the held
// worker before the hold was made, the second pass runs the round again
// with the holds in force from the start, so that tasks coming earlier in
// the interleaved order cannot take the held room either. Holds are not
// state: each round makes them again. A held worker only drains (nothing
// bound by the hold lands on the held room), so the shortfall of the
// waiting task on its best worker never grows from one round to the next,
// and it is placed once enough work there ends.
//
// # Gangs
//
// A gang is the tasks of one graph with the same Task.Gang (multi-node
// training: one task per node). They start all at once, each on a worker
// of its own, or not at all. When the round reaches a gang's first member,
// it tries the whole gang: every member must pass admission (the Admit
// hook, and the quotas and cluster limit counting the gang's total) and
// get a distinct worker it fits now. Members choose in task id order, each
// the best of the workers no earlier member took; should that leave one
// without a worker, earlier members move to other workers of theirs where
// that makes room (an augmenting path, as in bipartite matching). Only if
// every member has a worker are all placed; otherwise none is, and the
// later members are skipped. A gang holds no worker, so the tasks behind
// it go on while it waits; every member of a waiting gang gets the same
// reason, about the gang: "gang "train" needs 4 workers that can run its
// tasks, one each; 3 can". A gang starts only while the round is under its
// placement cap, and may overshoot it by its size less one.
//
// # Reasons
//
// Every task left unplaced gets a Reason: ReasonInfeasible (no worker of
// the input could run it even if idle, or its request alone exceeds a
// quota: it waits for the cluster to change), ReasonCapacity and
// ReasonStartLimit (it will fit once work ends or containers start),
// ReasonQuota, ReasonLimit (the Admit hook) and ReasonDeferred (the
// round's placement cap came first). Messages are specific: "no worker has
// 64 GiB of memory (the largest has 16 GiB)", "all 3 workers that fit are
// full (cluster at capacity)", "start rate limit: every fitting worker has
// 4 container starts in flight", "tenant team-a is at its quota of 100
// running tasks".
//
// # Speed
//
// Workers alike for the round's tasks (capacity, the labels that selectors
// name, images held by many, GPU kinds) form a group, checked once per task;
// within a group, workers also in the same state form a class, rated once
// per task from numbers it keeps. A placement moves one worker to another
// class. Within a pass room only shrinks, so once a task's shape fits
// nowhere, later tasks of that shape are skipped without a search. 10,000
// tasks on 1,000 workers take well under a second on two cores (see
// BenchmarkPlace); tests check this fast path against a brute-force
// reference that rates every worker for every task.
package scheduler
