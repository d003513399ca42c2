package fsm

import (
	"fmt"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// Rules versions. What apply does with an entry may change from one build
// to the next (a new rule, a fixed one); heads of two builds share one log
// during a rolling upgrade and on replay, so a change of what apply does
// takes effect only from the log index where the cluster's rules version
// reaches it (state.View.Rules), never by the build alone. The leader
// commits the next version (OpSetRules) only once every voter advertises
// that it can apply it (head.Config's gossip metadata, MetaKeyRules); a head
// that meets a version it cannot apply stops before changing its table
// (ApplyRules), naming the version it needs.
//
// The versions, and what each changed:
//
//   - 0: the rules of every log written before versions existed.
//   - 1: a retry's and a restarting service's backoff are computed by the
//     FSM from the task's own retry or restart count, the leader's base and
//     max and a seed carried in the TaskEventsCommand (state.RetryBackoff);
//     under 0 the leader computed each wait and carried it
//     (retry_backoff_nanos).
//   - 2: a lost attempt of a sandbox task (TaskSpec.sandbox) that had
//     started (its task RUNNING) fails the task at once with the code
//     SANDBOX_LOST instead of re-queueing it: a sandbox's state lives in
//     its container and is never silently replaced by an empty one. A
//     sandbox lost before it started re-queues as under 1.
//   - 3: sandbox snapshots and lifetimes: the ops OpSnapshotAdd,
//     OpSnapshotDelete and OpSandboxSetDeadline apply (refused, changing
//     nothing, below 3); a snapshot's row stays while its worker is DOWN
//     or LEFT (OpWorkerDown leaves it); OpSnapshotDelete is refused while
//     a sandbox created from the snapshot may still hold a container; and
//     OpSubmitGraph refuses a task whose snapshot fork the table does not
//     back (state.Txn.CheckForks: the snapshot exists, is the graph's
//     tenant's, and the task runs its image pinned to its worker) or that
//     runs a snapshot's image outside a fork. (Rules 3 had not been
//     released when its last three points were added to it.)
//   - 4: sandbox pause: the op OpSandboxPause applies (refused, changing
//     nothing, below 4), marking a RUNNING sandbox task's running attempt
//     paused (Attempt.paused) or unmarking it.
//   - 5: container admission policies: the op OpSetAdmissionPolicy
//     applies (refused, changing nothing, below 5), and OpSubmitGraph
//     refuses (PermissionDenied) a graph with a task that its tenant's
//     effective policy does not allow (state.Txn.CheckAdmission: its
//     network or an added capability);
//     and the graph archive: the op OpArchiveGraphs applies (refused,
//     changing nothing, below 5), moving finished graphs past their
//     retention from the live table to a summary in the archive
//     (state.Txn.ArchiveGraphs) and dropping old summaries; a submission
//     of an archived graph's id answers that it existed, and
//     OpDeleteGraph of an archived graph removes its summary (the archive
//     is empty below 5, so these two change nothing there).
//   - 6: API tokens: the ops OpTokenCreate and OpTokenRevoke apply
//     (refused, changing nothing, below 6), adding and removing rows of
//     the token table (state.Txn.CreateToken, RevokeToken).
//   - 7: the built-in admission policy of a cluster whose ACLs were
//     bootstrapped (the table holds the bootstrap marker) runs every
//     container as 65534:65534 with no network but none
//     (admission.DefaultFor(true),
//     state.RulesACLDefault): OpSetAdmissionPolicy removes a row equal to
//     that default, not one equal to the default without ACLs (kept: it
//     runs containers as the image's user). Without the marker nothing
//     changed.
//   - 8: a submission's plan: OpSubmitGraph applies the placements its
//     last chunk carries (SubmitGraphCommand.plan) once the graph is in
//     the table, as OpPlan would (applyPlan), in the same entry; below 8
//     the field is ignored (no leader writes it there).
//   - 9: an event batch's plan: OpTaskEvents applies the placements it
//     carries (TaskEventsCommand.plan) after its events, as OpPlan would
//     (applyPlan), in the same entry: a slot an exit freed, or a task an
//     exit made ready, is placed in the exit's own entry. Below 9 the
//     field is ignored (no leader writes it there).
const RulesCurrent uint64 = 9

// RulesSubmitPlan is the first rules version under which a submission
// carries the placements of its ready tasks (SubmitGraphCommand.plan).
const RulesSubmitPlan uint64 = 8

// RulesEventPlan is the first rules version under which a batch of attempt
// events carries the placements of a round run on the table as the batch
// leaves it (TaskEventsCommand.plan).
const RulesEventPlan uint64 = 9

// MetaKeyRules is the gossip metadata key (gossip.Meta.Extra) under which a
// head advertises the highest rules version its build applies, in decimal.
const MetaKeyRules = "rules"

// ErrRulesTooNew is the panic value's prefix of a head that applies an
// OpSetRules above RulesCurrent: the cluster moved to rules this build does
// not know (an older build joined a cluster already upgraded, or an
// operator downgraded a head). The head stops rather than apply entries
// under rules it would get wrong; installing a newer build fixes it.
const ErrRulesTooNew = "fsm: the cluster's rules version is newer than this build's"

// applySetRules raises the rules version in force to version (a version at
// or below the current one changes nothing) and returns the version in
// force afterwards. A version above RulesCurrent panics, the table untouched:
// every entry after it would apply under rules this build does not have.
func applySetRules(txn *state.Txn, index, version uint64) uint64 {
	if version > RulesCurrent {
		panic(fmt.Sprintf("%s: index %d sets rules %d, this build applies rules up to %d; "+
			"upgrade this head to a build with rules %d or later (megaflow-head --version prints a build's rules)",
			ErrRulesTooNew, index, version, RulesCurrent, version))
	}
	return txn.SetRules(version)
}

// retryBackoff is the backoff of event i of cmd under the rules in force:
// the leader's precomputed wait under 0, else the command's parameters with
// a draw mixed from its seed and i.
func retryBackoff(rules uint64, cmd *wire.TaskEventsCommand, i int) state.RetryBackoff {
	if rules == 0 {
		var fixed int64
		if b := cmd.GetRetryBackoffNanos(); i < len(b) {
			fixed = b[i]
		}
		return state.RetryBackoff{Fixed: fixed}
	}
	return state.RetryBackoff{
		Base: cmd.GetRetryBackoffBaseNanos(),
		Max:  cmd.GetRetryBackoffMaxNanos(),
		Draw: splitmix64(cmd.GetRetrySeed() + uint64(i)),
	}
}

// splitmix64 is SplitMix64's output function (Steele, Lea and Flood,
// "Fast splittable pseudorandom number generators", OOPSLA 2014): it turns
// consecutive inputs into well-mixed 64-bit outputs, integers only.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
