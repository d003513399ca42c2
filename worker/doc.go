// Package worker is MegaFlow's worker daemon: it joins the gossip pool as a
// worker, keeps one stream (WorkerService.Connect) to the head leader, runs
// each assigned attempt in its own container through a contract.Runtime,
// reports the attempts' events, and reconciles its containers so that none
// leaks. Only cmd/megaflow-worker and tests import it.
//
// # Pieces
//
// The life cycle of one attempt is the pure state machine of
// worker/attempt; a driver goroutine per attempt carries out its effects
// against the runtime (each call with a deadline) and feeds the results
// back. The stream goroutine owns the connection: it finds the leader,
// sends the Hello, event batches and heartbeats, and hands assignments,
// stops and acks to the attempts. The reconcile goroutine lists the
// worker's containers every ReconcileInterval. Every goroutine is started by
// Run and ended before Run returns.
//
// # The stream, as the head sees it
//
// The worker tries the heads in order (Config.Heads, else the heads in
// gossip), follows NOT_LEADER redirects (errs.NotLeader with LeaderAddr), and
// backs off with jitter when no head takes the stream. On every new stream
// it sends:
//
//  1. WorkerHello: its WorkerInfo and every attempt it holds in memory:
//     starting (container_id empty, started false), running, stopping, and
//     finished ones whose final event is not yet acked (started true). After
//     a restart these are the containers found with its labels.
//  2. After the head's Welcome: every EventBatch not yet acked, again, with
//     its original seq; then new batches.
//  3. A Heartbeat every HeartbeatInterval.
//
// Batch seqs increase by one per batch; the first is the worker process's
// start time in Unix nanoseconds, so seqs also grow across restarts. An Ack
// with seq N acknowledges every batch up to N. Delivery is at least once:
// a batch may arrive twice (re-sent after a reconnect), so the head must
// deduplicate events by (task, attempt, kind).
//
// Events of one attempt, in order:
//
//   - STARTED (container_id set) when its container started. Not sent for an
//     attempt stopped while it started, nor for an adopted container.
//   - Then exactly one final event:
//     EXITED with exit_code when the process ended on its own (result set on
//     exit 0, see ResultPrefix; reason explains an ignored result line);
//     FAILED with reason when it could not start (image not found, runtime
//     unavailable, bad spec: the runtime's message), when it was OOM-killed
//     (oom_killed, reason "OOM killed (memory limit 32 MiB)") or when its
//     container vanished;
//     TIMED_OUT when the worker killed it at spec.timeout_seconds, counted
//     from when the worker began starting it (image pull included);
//     STOPPED when it was stopped because the head sent StopAttempt (reason:
//     the head's) or because a newer attempt of the task was assigned here
//     (reason "superseded by attempt N").
//
// A StopAttempt for an attempt the worker does not hold is answered with a
// STOPPED event at once (reason "attempt not held by worker ..."), so the
// head can close it. Events of attempts the head no longer considers current
// should be ignored by the head.
//
// # Fencing
//
// Each assignment names (task, attempt, leader term). A second assignment of
// an attempt the worker holds is ignored; one for an attempt older than an
// attempt of the same task held here is ignored; one for a newer attempt
// stops the older attempt first and starts once it stopped. A Welcome with a
// term older than one already seen (a deposed leader) is refused.
//
// # Containers and adoption
//
// A container is named by ContainerName and labelled with LabelCluster,
// LabelWorker, LabelClusterID (the cluster's id from the Welcome, kept in
// DataDir/cluster-id: clusterid.go), LabelTask, LabelAttempt, LabelGraph (and LabelTerm,
// LabelDeadline, LabelTimeout, LabelMemory). Its output goes to
// DataDir/logs/<task id, '/' as '+'>/<attempt>.log, which outlives it;
// the runtime creates the file and its directory with the first byte of
// output, so an attempt that prints nothing leaves neither (its log is
// empty: the result scan and the log shipper take a missing file so).
// A container is removed only after the head acked its final event, so a
// worker that dies in between finds it exited on restart and reports it
// again.
//
// When Run starts it lists the containers with its labels. Each is held as
// an attempt and announced in the first Hello. An exited one reports EXITED
// (or FAILED when OOM-killed) with its code at once and is removed once
// acked; the head ignores it if it no longer wants it. A running one waits:
// the head answers StopAttempt for the attempts it does not consider
// current, and those are stopped (STOPPED) and removed; the others are taken
// over at the first reconciliation round at least ReconcileInterval after
// the Welcome: the worker waits on them (same container id, no second
// STARTED) and reports their final event. Every round also stops and
// removes containers with the worker's labels whose attempt it does not
// hold.
//
// # Persistent mode and sessions
//
// A task with mode EXECUTION_MODE_PERSISTENT runs as an exec (its command,
// environment, working directory, log file, timeout) inside a warm
// container of a pool per (image, tenant, limits), which runs an idle
// keeper process (Config.PoolKeeper) and is reused by the next task of the
// same key; tasks of one graph with the same session share one container,
// one after another. The events are those of an ephemeral attempt, with
// the warm container's id. Pool sizes, idle removal, health checks,
// session bindings and what a restart does are described in pool.go.
// A sandbox's attempt may instead take an idle warm container of its key
// for good (a claim recorded in the data dir before STARTED, adopted by a
// restarted worker); warmbox.go describes it.
//
// # Stopping
//
// Shutdown refuses new assignments, leaves the gossip pool and closes the
// stream; containers keep running, and a worker restarted with the same
// NodeID and runtime takes them over as above. Kill does the same without
// the goodbyes, like a crash.
package worker
