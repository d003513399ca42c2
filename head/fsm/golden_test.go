package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// updateGolden writes the stored logs that are missing, with their
// snapshots' digests:
//
//	go test ./head/fsm -run TestReplayGoldenLog -update-golden
//
// Only for a new stored log (add it to goldenLogs): a stored log is never
// rewritten, since an earlier build wrote it; an apply change that makes
// one replay differently must go behind a new rules version (rules.go)
// instead.
var updateGolden = flag.Bool("update-golden", false, "write the missing logs of testdata/golden")

// goldenLog is a log written by an earlier build, in testdata/golden:
// name.log holds its entries (each a uvarint length, then the entry),
// name.sha256 the SHA-256 of the records (the snapshot less its header) of
// the table that build applied it to, from an empty one.
type goldenLog struct {
	name string
	// rules is the rules version in force after the whole log.
	rules uint64
	// generate writes the log's entries (for -update-golden).
	generate func(t *testing.T) [][]byte
	// check, if set, checks that the replayed table shows what the log
	// was written to cover.
	check func(t *testing.T, v *state.View)
}

// goldenLogs are the stored logs. rules0-1: 300 random entries under rules
// 0, OpSetRules 1, 300 more under rules 1 (the generator of
// TestDeterminism as it was then, seed 7, with the rare ops, its own rules
// entries removed; the generator has changed since, so generate now writes
// another log: the stored one stays). rules2-3: OpSetRules 2, 300 random
// entries under rules 2 (a started sandbox task that is lost fails with
// SANDBOX_LOST; the snapshot and deadline ops are refused), OpSetRules 3,
// 300 more under rules 3 (sandbox snapshots recorded, counted per tenant
// and kept while their worker is down, forks checked at apply, sandbox
// deadlines set): seed 10 (one whose table shows each), with the rare and
// the sandbox ops (sandboxOp). Rules 3 had not been released when its
// snapshot rows stopped being dropped with their worker, so this log was
// written again then, under the rules 3 that shipped. rules3-4:
// OpSetRules 2 and 3, 300 random entries under rules 3 and a pause of
// each sandbox then running (OpSandboxPause refused), OpSetRules 4, 300
// more under rules 4 (sandboxes paused and resumed) and again a pause of
// each running sandbox: seed 24, with the rare and the sandbox ops.
// rules4-5: OpSetRules 2, 3 and 4, 300 random entries under rules 4,
// admission policies (refused) and graphs asking for the host network and
// capabilities (committed), OpSetRules 5, the same policies (set) and
// graphs (refused or committed as they allow), 300 more random entries
// and a pause of each running sandbox, with the rare ops (archives of
// finished graphs among them) and the sandbox ops (seed 49: one whose log
// ends with a sandbox running and some graphs archived). Written again
// when the two rules-5 branches (admission, archive) merged, before rules
// 5 was released.
// rules6-7: OpSetRules 2 to 6, 200 random entries, the token ops (an ACL
// bootstrap among them), a policy equal to each built-in default (under
// rules 6: the one without ACLs is removed), OpSetRules 7, two more such
// policies (under rules 7 with the bootstrap marker: the one for clusters
// with ACLs is removed), 200 more random entries: seed 67.
// rules7-8: OpSetRules 2 to 7, 200 random entries (some submissions carry
// plans: ignored), a graph submitted with a plan placing its task
// (ignored), OpSetRules 8, another (placed in its entry), 200 more random
// entries (plans applied): seed 78.
// rules8-9: OpSetRules 2 to 8, 200 random entries (some event batches
// carry plans: ignored), an exit whose batch carries a plan placing the
// task it makes room for (ignored), OpSetRules 9, another (placed in its
// entry), 200 more random entries (plans applied): seed 89.
var goldenLogs = []goldenLog{
	{name: "rules0-1", rules: 1, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(7)), tb: t, rareEvery: 6}
		entries := withoutRules(gen.entries(300))
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(1)))
		return append(entries, withoutRules(gen.entries(300))...)
	}},
	{name: "rules2-3", rules: 3, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(10)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		entries := [][]byte{entry(t, OpSetRules, wrapperspb.UInt64(2))}
		gen.cmd(OpSetRules, wrapperspb.UInt64(2))
		entries = append(entries, withoutRules(gen.entries(300))...)
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(3)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(3))
		return append(entries, withoutRules(gen.entries(300))...)
	}, check: checkRules23Coverage},
	{name: "rules3-4", rules: 4, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(goldenRules34Seed)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		var entries [][]byte
		for _, r := range []uint64{2, 3} {
			entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(r)))
			gen.cmd(OpSetRules, wrapperspb.UInt64(r))
		}
		entries = append(entries, withoutRules(gen.entries(300))...)
		entries = append(entries, pauseRunning(t, gen)...) // refused: rules 3
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(4)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(4))
		entries = append(entries, withoutRules(gen.entries(300))...)
		return append(entries, pauseRunning(t, gen)...)
	}, check: checkRules34Coverage},
	{name: "rules4-5", rules: 5, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(goldenRules45Seed)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		var entries [][]byte
		for _, r := range []uint64{2, 3, 4} {
			entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(r)))
			gen.cmd(OpSetRules, wrapperspb.UInt64(r))
		}
		entries = append(entries, withoutRules(gen.entries(300))...)
		entries = append(entries, admissionEntries(t, gen, "r4")...) // policies refused, host and capabilities committed
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(5)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(5))
		entries = append(entries, admissionEntries(t, gen, "r5")...) // policies set, graphs refused and committed
		entries = append(entries, withoutRules(gen.entries(300))...)
		return append(entries, pauseRunning(t, gen)...)
	}, check: checkRules45Coverage},
	{name: "rules5-6", rules: 6, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(56)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		var entries [][]byte
		for _, r := range []uint64{2, 3, 4, 5} {
			entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(r)))
			gen.cmd(OpSetRules, wrapperspb.UInt64(r))
		}
		entries = append(entries, withoutRules(gen.entries(200))...)
		entries = append(entries, tokenEntries(t, gen, 'a')...) // refused: rules 5
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(6)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(6))
		entries = append(entries, tokenEntries(t, gen, 'b')...)
		return append(entries, withoutRules(gen.entries(200))...)
	}, check: checkRules56Coverage},
	{name: "rules6-7", rules: 7, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(67)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		var entries [][]byte
		for _, r := range []uint64{2, 3, 4, 5, 6} {
			entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(r)))
			gen.cmd(OpSetRules, wrapperspb.UInt64(r))
		}
		entries = append(entries, withoutRules(gen.entries(200))...)
		entries = append(entries, tokenEntries(t, gen, 'c')...)
		entries = append(entries, aclDefaultEntries(gen, "r6")...) // the default without ACLs in force
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(7)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(7))
		entries = append(entries, aclDefaultEntries(gen, "r7")...) // the default for clusters with ACLs in force
		return append(entries, withoutRules(gen.entries(200))...)
	}, check: checkRules67Coverage},
	{name: "rules7-8", rules: 8, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(78)), plans: rand.New(rand.NewSource(78)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		var entries [][]byte
		for _, r := range []uint64{2, 3, 4, 5, 6, 7} {
			entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(r)))
			gen.cmd(OpSetRules, wrapperspb.UInt64(r))
		}
		entries = append(entries, withoutRules(gen.entries(200))...) // submissions' plans ignored
		entries = append(entries, plannedSubmission(t, gen, "r7-plan")...)
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(8)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(8))
		entries = append(entries, plannedSubmission(t, gen, "r8-plan")...)
		if a := gen.ref.View().Task("r8-plan/t0").CurrentAttempt(); a == nil || a.AssignUnixNanos != plannedNanos {
			t.Fatal("rules7-8: r8-plan's placement was not applied with it; choose another seed")
		}
		return append(entries, withoutRules(gen.entries(200))...) // applied
	}, check: checkRules78Coverage},
	{name: "rules8-9", rules: 9, generate: func(t *testing.T) [][]byte {
		gen := &logGen{rng: rand.New(rand.NewSource(89)), plans: rand.New(rand.NewSource(89)), tb: t, rareEvery: 6, sandboxEvery: 3, ref: newTestFSM(t, 0)}
		var entries [][]byte
		for _, r := range []uint64{2, 3, 4, 5, 6, 7, 8} {
			entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(r)))
			gen.cmd(OpSetRules, wrapperspb.UInt64(r))
		}
		entries = append(entries, withoutRules(gen.entries(200))...) // event batches' plans ignored
		entries = append(entries, plannedEvents(t, gen, "r8-events")...)
		entries = append(entries, entry(t, OpSetRules, wrapperspb.UInt64(9)))
		gen.cmd(OpSetRules, wrapperspb.UInt64(9))
		entries = append(entries, plannedEvents(t, gen, "r9-events")...)
		if a := gen.ref.View().Task("r9-events/t1").CurrentAttempt(); a == nil || a.AssignUnixNanos != plannedNanos {
			t.Fatal("rules8-9: r9-events/t1's placement was not applied with its event batch; choose another seed")
		}
		return append(entries, withoutRules(gen.entries(200))...) // applied
	}, check: checkRules89Coverage},
}

// plannedEvents appends to gen, and returns, a graph id of two tasks that
// each fill a worker announced just before (<id>-worker): t0 placed and
// started there, then t0's exit in a batch carrying a plan that places
// t1 on the room it frees, at plannedNanos.
func plannedEvents(t *testing.T, gen *logGen, id string) [][]byte {
	t.Helper()
	gen.out = nil
	gen.nanos++
	worker := id + "-worker"
	gen.cmd(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: gen.nanos, Info: &wire.WorkerInfo{
		Id: worker, Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}})
	t0, t1 := spec("t0"), spec("t1")
	t0.Resources = &wire.Resources{CpuMillis: 1000, MemoryBytes: 1}
	t1.Resources = &wire.Resources{CpuMillis: 1000, MemoryBytes: 1}
	gen.cmd(OpSubmitGraph, submitCmd(graphSpec(id, t0, t1), gen.nanos))
	gen.cmd(OpPlan, &wire.PlanCommand{LeaderTerm: 7, UnixNanos: gen.nanos,
		Attempts: []*wire.PlannedAttempt{{TaskId: id + "/t0", Attempt: 1, WorkerId: worker}}})
	events := func(kind wire.AttemptEventKind, plan *wire.PlanCommand) *wire.TaskEventsCommand {
		return &wire.TaskEventsCommand{WorkerId: worker, UnixNanos: gen.nanos, Plan: plan,
			Events: []*wire.AttemptEvent{{TaskId: id + "/t0", Attempt: 1, Kind: kind, UnixNanos: gen.nanos}}}
	}
	gen.cmd(OpTaskEvents, events(kStarted, nil))
	gen.cmd(OpTaskEvents, events(kExited, &wire.PlanCommand{LeaderTerm: 7, UnixNanos: plannedNanos,
		Attempts: []*wire.PlannedAttempt{{TaskId: id + "/t1", Attempt: 1, WorkerId: worker}}}))
	out := gen.out
	gen.out = nil
	return out
}

// checkRules89Coverage checks that the rules8-9 log's table holds what
// rules 9 changed: the plan of an event batch under rules 8 was ignored,
// the one under rules 9 placed its task in the batch's entry.
func checkRules89Coverage(t *testing.T, v *state.View) {
	t.Helper()
	checkPlanCoverage(t, v, "rules8-9", "an event batch's", "r8-events/t1", "r9-events/t1")
}

// checkPlanCoverage checks that in v (the table a golden log replays to)
// task ignored was never assigned at plannedNanos (its command's plan
// came under the rules before) and task applied was, by its first attempt
// (its command's plan came under the new rules); carrier names the
// command that carried the plan.
func checkPlanCoverage(t *testing.T, v *state.View, log, carrier, ignored, applied string) {
	t.Helper()
	for _, a := range v.Task(ignored).Attempts {
		if a.AssignUnixNanos == plannedNanos {
			t.Fatalf("the %s log replays to %s placed by %s plan under the rules before: %+v", log, ignored, carrier, a)
		}
	}
	if a := v.Task(applied).Attempts; len(a) == 0 || a[0].AssignUnixNanos != plannedNanos {
		t.Fatalf("the %s log replays to %s's attempts %+v; want the first placed by %s plan", log, applied, a, carrier)
	}
}

// plannedNanos is the time of the plan plannedSubmission's graph carries,
// which no other entry of the log uses.
const plannedNanos = 1 << 60

// plannedSubmission appends to gen, and returns, the submission of graph
// id (one task) carrying a plan that places its task, at plannedNanos, on
// a worker announced just before (<id>-worker).
func plannedSubmission(t *testing.T, gen *logGen, id string) [][]byte {
	t.Helper()
	gen.out = nil
	gen.nanos++
	s := spec("t0")
	s.Resources = &wire.Resources{CpuMillis: 1, MemoryBytes: 1}
	cmd := submitCmd(graphSpec(id, s), gen.nanos)
	worker := id + "-worker"
	gen.cmd(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: gen.nanos, Info: &wire.WorkerInfo{
		Id: worker, Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}})
	cmd.Plan = &wire.PlanCommand{LeaderTerm: 7, UnixNanos: plannedNanos,
		Attempts: []*wire.PlannedAttempt{{TaskId: id + "/t0", Attempt: 1, WorkerId: worker}}}
	gen.cmd(OpSubmitGraph, cmd)
	out := gen.out
	gen.out = nil
	return out
}

// checkRules78Coverage checks that the rules7-8 log's table holds what
// rules 8 changed: the plan of a submission under rules 7 was ignored,
// the one under rules 8 placed its task in the submission's entry.
func checkRules78Coverage(t *testing.T, v *state.View) {
	t.Helper()
	checkPlanCoverage(t, v, "rules7-8", "its submission's", "r7-plan/t0", "r8-plan/t0")
}

// aclDefaultEntries appends to gen, and returns, two admission policies of
// tenants <p>-image (the default without ACLs: the image's user) and
// <p>-nobody (the default for clusters with ACLs: no network but none,
// 65534:65534), on a cluster whose ACLs were bootstrapped.
func aclDefaultEntries(gen *logGen, p string) [][]byte {
	gen.out = nil
	gen.nanos++
	gen.cmd(OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{UnixNanos: gen.nanos,
		Policy: &wire.AdmissionPolicy{Tenant: p + "-image", AllowedNetworks: []string{"*"}}})
	gen.nanos++
	gen.cmd(OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{UnixNanos: gen.nanos,
		Policy: &wire.AdmissionPolicy{Tenant: p + "-nobody", RunAsUser: "65534:65534"}})
	out := gen.out
	gen.out = nil
	return out
}

// checkRules67Coverage checks that the rules6-7 log's table holds what
// rules 7 changed: under rules 6 the row equal to the default without
// ACLs was removed and the nobody row kept; under rules 7, with the
// bootstrap marker, the other way round, and the default in force is the
// one for clusters with ACLs.
func checkRules67Coverage(t *testing.T, v *state.View) {
	t.Helper()
	var got []string
	for _, p := range v.AdmissionPolicies() {
		if strings.HasPrefix(p.GetTenant(), "r6-") || strings.HasPrefix(p.GetTenant(), "r7-") {
			got = append(got, p.GetTenant())
		}
	}
	if strings.Join(got, " ") != "r6-nobody r7-image" || !v.ACLDefaultAdmission() {
		t.Fatalf("the rules6-7 log replays to policy rows %v, the default with ACLs in force %v; want r6-nobody r7-image, true", got, v.ACLDefaultAdmission())
	}
}

// tokenEntries appends to gen, and returns, token ops (under rules 6; under
// 5 every one is refused): a bootstrap with its relay key, a second
// bootstrap with another (refused), a
// read token of acme with a lifetime, a submit token of beta, a token with
// a taken accessor and one out of bounds (refused), and a revocation of
// the submit token. c makes the accessors unique.
func tokenEntries(t *testing.T, gen *logGen, c byte) [][]byte {
	t.Helper()
	gen.out = nil
	n := 0
	create := func(tenant string, role wire.TokenRole, ttl int64, bootstrap bool, acc string) {
		n++
		gen.nanos++
		if acc == "" {
			acc = strings.Repeat(string(c), 15) + strconv.Itoa(n%10)
		}
		exp := int64(0)
		if ttl != 0 {
			exp = gen.nanos + ttl
		}
		var key []byte
		if bootstrap {
			key = bytes.Repeat([]byte{c, byte(n)}, 16) // the relay key
		}
		gen.cmd(OpTokenCreate, &wire.TokenCreateCommand{Bootstrap: bootstrap, RelayKey: key, Token: &wire.Token{Accessor: acc,
			SecretHash: bytes.Repeat([]byte{c, byte(n)}, 16), Tenant: tenant, Role: role, CreateUnixNanos: gen.nanos, ExpireUnixNanos: exp}})
	}
	create("", wire.TokenRole_TOKEN_ROLE_ADMIN, 0, true, "")
	create("", wire.TokenRole_TOKEN_ROLE_ADMIN, 0, true, "") // bootstrapped already
	create("acme", wire.TokenRole_TOKEN_ROLE_READ, int64(time.Hour), false, "")
	create("beta", wire.TokenRole_TOKEN_ROLE_SUBMIT, 0, false, "")
	create("beta", wire.TokenRole_TOKEN_ROLE_SUBMIT, 0, false, strings.Repeat(string(c), 15)+"3") // accessor taken
	create("", wire.TokenRole_TOKEN_ROLE_READ, 0, false, "")                                      // no tenant
	gen.cmd(OpTokenRevoke, &wire.TokenRevokeCommand{Accessor: strings.Repeat(string(c), 15) + "4", UnixNanos: gen.nanos})
	out := gen.out
	gen.out = nil
	return out
}

// checkRules56Coverage checks that the rules5-6 log's table holds what
// rules 6 changed: the bootstrap marker with the first bootstrap's relay
// key and the two tokens left (the admin and acme's), none of the tokens
// proposed under rules 5.
func checkRules56Coverage(t *testing.T, v *state.View) {
	t.Helper()
	var got []string
	for _, tok := range v.Tokens() {
		got = append(got, tok.GetAccessor()+":"+tok.GetTenant())
	}
	if v.ACLBootstrap() == nil || strings.Join(got, " ") != "bbbbbbbbbbbbbbb1: bbbbbbbbbbbbbbb3:acme" {
		t.Fatalf("the rules5-6 log replays to tokens %v, bootstrap marker %v; want the admin's and acme's, and the marker", got, v.ACLBootstrap())
	}
	// The first bootstrap's relay key, not the refused second one's.
	if want := bytes.Repeat([]byte{'b', 1}, 16); !bytes.Equal(v.RelayKey(), want) {
		t.Fatalf("the rules5-6 log replays to relay key %x; want %x, the first bootstrap's", v.RelayKey(), want)
	}
}

// goldenRules45Seed is the generator's seed of the rules4-5 log.
const goldenRules45Seed = 49

// admissionEntries appends to gen, and returns, admission policy changes
// and submissions that they refuse or allow (under rules 5; under 4 the
// policies are refused and every graph is committed): a host-network graph
// and a SYS_ADMIN graph of tenant beta (the default policy refuses both),
// a policy letting acme use host, a cluster row allowing NET_ADMIN and
// confining containers, host and NET_ADMIN graphs of acme and beta, and a
// row set and removed again. prefix makes the graph ids unique.
func admissionEntries(t *testing.T, gen *logGen, prefix string) [][]byte {
	t.Helper()
	gen.out = nil
	task := func(network string, caps ...string) *wire.TaskSpec {
		s := spec("t")
		s.Network, s.Capabilities = network, caps
		return s
	}
	submit := func(id, tenant string, s *wire.TaskSpec) {
		g := graphSpec(prefix+"-"+id, spec("plain"), s)
		g.Tenant = tenant
		gen.nanos++
		gen.cmd(OpSubmitGraph, submitCmd(g, gen.nanos))
	}
	policy := func(p *wire.AdmissionPolicy) {
		gen.nanos++
		gen.cmd(OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{Policy: p, UnixNanos: gen.nanos})
	}
	submit("beta-host", "beta", task("host"))
	submit("beta-cap", "beta", task("", "SYS_ADMIN"))
	policy(&wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"*", "host"}})
	policy(&wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, AllowedCapabilities: []string{"NET_ADMIN"}, ReadOnlyRootFs: true,
		RunAsUser: "65534:65534", MaxPids: 64})
	submit("acme-host", "acme", task("host"))
	submit("acme-cap", "acme", task("", "NET_ADMIN")) // acme's row allows no capability
	submit("beta-cap2", "beta", task("bridge", "NET_ADMIN"))
	submit("beta-host2", "beta", task("host"))
	policy(&wire.AdmissionPolicy{Tenant: "gamma", AllowedNetworks: []string{"host"}})
	policy(&wire.AdmissionPolicy{Tenant: "gamma", AllowedNetworks: []string{"*"}}) // removed again
	out := gen.out
	gen.out = nil
	return out
}

// checkRules45Coverage checks that the rules4-5 log's table holds what
// rules 5 changed: admission policy rows, graphs refused under 5 that
// were committed under 4, and graphs the policies allow.
func checkRules45Coverage(t *testing.T, v *state.View) {
	t.Helper()
	if n := len(v.AdmissionPolicies()); n != 2 {
		t.Fatalf("the rules4-5 log replays to %d admission policies; want 2 (the cluster row, acme's)", n)
	}
	for id, want := range map[string]bool{
		"r4-beta-host": true, "r4-beta-cap": true, "r4-acme-cap": true,
		"r5-beta-host": false, "r5-beta-cap": false, "r5-acme-cap": false, "r5-beta-host2": false,
		"r5-acme-host": true, "r5-beta-cap2": true,
	} {
		if got := v.Graph(id) != nil; got != want {
			t.Errorf("graph %s committed: %v; want %v", id, got, want)
		}
	}
	archived := 0
	for range v.ArchivedGraphs() {
		archived++
	}
	if archived == 0 {
		t.Error("the rules4-5 log replays to no archived graph; want the rare OpArchiveGraphs to have archived some (pick another seed)")
	}
}

// goldenRules34Seed is the generator's seed of the rules3-4 log.
const goldenRules34Seed = 24

// withoutRules is es less its OpSetRules entries.
func withoutRules(es [][]byte) [][]byte {
	var out [][]byte
	for _, e := range es {
		if Op(e[0]) != OpSetRules {
			out = append(out, e)
		}
	}
	return out
}

// checkRules23Coverage checks that the rules2-3 log's table holds what
// rules 2 and 3 changed: tasks failed with SANDBOX_LOST, snapshot rows,
// and a sandbox whose deadline OpSandboxSetDeadline changed from 3600.
func checkRules23Coverage(t *testing.T, v *state.View) {
	t.Helper()
	lost := 0
	for task := range v.Tasks() {
		if task.ReasonCode == wire.ReasonCode_REASON_CODE_SANDBOX_LOST {
			lost++
		}
	}
	moved := 0
	for g := range v.Graphs() {
		if strings.HasPrefix(g.ID, "sbx-") && g.DeadlineSeconds != 3600 {
			moved++
		}
	}
	if n := len(v.Snapshots("")); lost == 0 || n == 0 || moved == 0 {
		t.Fatalf("the rules2-3 log replays to %d SANDBOX_LOST tasks, %d snapshots, %d sandboxes with a new deadline; want some of each", lost, n, moved)
	}
}

// pauseRunning appends to gen's log a pause of each sandbox RUNNING in its
// reference table, on its current attempt, and returns those entries; it
// fails the test when no sandbox runs.
func pauseRunning(t *testing.T, gen *logGen) [][]byte {
	t.Helper()
	var out [][]byte
	v := gen.ref.View()
	for _, id := range gen.sandboxes {
		task := v.Task(id + "/" + sandboxTaskName)
		if task == nil || task.State != wire.TaskState_TASK_STATE_RUNNING {
			continue
		}
		e := entry(t, OpSandboxPause, &wire.SandboxPauseCommand{GraphId: id, Attempt: task.CurrentAttempt().Number, Paused: true, UnixNanos: gen.nanos})
		gen.add(e)
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatal("no sandbox runs in the generated log: pick another seed")
	}
	return out
}

// checkRules34Coverage checks that the rules3-4 log's table holds what
// rules 4 changed: sandboxes RUNNING on an attempt marked paused.
func checkRules34Coverage(t *testing.T, v *state.View) {
	t.Helper()
	paused := 0
	for task := range v.Tasks() {
		if a := task.ActiveAttempt(); a != nil && a.Paused && task.State == wire.TaskState_TASK_STATE_RUNNING {
			paused++
		}
	}
	if paused == 0 {
		t.Fatal("the rules3-4 log replays to no paused sandbox; want some")
	}
}

// TestReplayGoldenLog: each log written by an earlier build replays to the
// same table, byte for byte in its snapshot, one entry at a time and in
// batches. A change of what apply does under a rules version already in
// use fails here; it belongs behind a new version (rules.go), so that logs
// and heads of older builds keep their meaning.
func TestReplayGoldenLog(t *testing.T) {
	for _, gl := range goldenLogs {
		t.Run(gl.name, func(t *testing.T) {
			logPath := filepath.Join("testdata", "golden", gl.name+".log")
			digestPath := filepath.Join("testdata", "golden", gl.name+".sha256")
			if _, err := os.Stat(logPath); *updateGolden && os.IsNotExist(err) {
				writeGolden(t, gl, logPath, digestPath)
			}
			raw, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			var entries [][]byte
			for len(raw) > 0 {
				n, k := binary.Uvarint(raw)
				if k <= 0 || uint64(len(raw)-k) < n {
					t.Fatalf("%s: truncated after %d entries", logPath, len(entries))
				}
				entries, raw = append(entries, raw[k:k+int(n)]), raw[k+int(n):]
			}
			want, err := os.ReadFile(digestPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, batched := range []bool{false, true} {
				f := newTestFSM(t, 0)
				applyAll(f, entries, batched, rand.New(rand.NewSource(1)))
				if r := f.View().Rules(); r != gl.rules {
					t.Fatalf("rules %d after the golden log %s; want %d", r, gl.name, gl.rules)
				}
				sum := sha256.Sum256(snapshotRecords(t, f.View()))
				if got := hex.EncodeToString(sum[:]); got != strings.TrimSpace(string(want)) {
					t.Fatalf("the golden log %s (%d entries, batched %v) replays to a table whose snapshot digest is %s, not the stored %s: "+
						"apply now does something else with entries an earlier build wrote; put the change behind a new rules version (head/fsm/rules.go)",
						gl.name, len(entries), batched, got, strings.TrimSpace(string(want)))
				}
				if gl.check != nil {
					gl.check(t, f.View())
				}
			}
		})
	}
}

// snapshotRecords is the snapshot of v without its header: the digest is
// of the table's records, whichever header its rules version calls for.
func snapshotRecords(t *testing.T, v *state.View) []byte {
	t.Helper()
	return snapshotBytes(t, v)[len(snapshotMagic):]
}

// writeGolden generates gl's log and writes it and the digest of the
// table it applies to.
func writeGolden(t *testing.T, gl goldenLog, logPath, digestPath string) {
	t.Helper()
	entries := gl.generate(t)
	var buf bytes.Buffer
	for _, e := range entries {
		buf.Write(binary.AppendUvarint(nil, uint64(len(e))))
		buf.Write(e)
	}
	f := newTestFSM(t, 0)
	applyAll(f, entries, false, nil)
	sum := sha256.Sum256(snapshotRecords(t, f.View()))
	if err := os.WriteFile(logPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(digestPath, []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d entries) and %s", logPath, len(entries), digestPath)
}
