package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/megaflow/megaflow/internal/gossip"
	specbound "github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/internal/within"
	"github.com/megaflow/megaflow/worker/attempt"
)

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := DefaultConfig()
		c.NodeID, c.DataDir, c.GossipAddr = "w1", "/tmp/x", "127.0.0.1:0"
		c.Join = []string{"127.0.0.1:7946"}
		c.Runtime = newFakeRT(t)
		return c
	}
	c := good()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(good) = %v", err)
	}
	set := tlstest.New(t, t.TempDir())
	c.TLS = set.Store(t, tlsconfig.RoleWorker, "w1")
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(good, with its own certificate) = %v", err)
	}
	old, err := tlsconfig.Load(set.IssueWithoutNode(t, tlsconfig.RoleWorker, "old"))
	if err != nil {
		t.Fatal(err)
	}
	w2, h1 := set.Store(t, tlsconfig.RoleWorker, "w2"), set.Store(t, tlsconfig.RoleHead, "h1")
	for _, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"--node-id is empty", func(c *Config) { c.NodeID = "" }},
		{"--node-id \"w/1\"", func(c *Config) { c.NodeID = "w/1" }},
		{"--node-id \"-w\"", func(c *Config) { c.NodeID = "-w" }},
		{"ClusterName is empty", func(c *Config) { c.ClusterName = "" }},
		{"--data-dir is empty", func(c *Config) { c.DataDir = "" }},
		{"--gossip-addr", func(c *Config) { c.GossipAddr = "nope" }},
		{"--join: address 1", func(c *Config) { c.Join = []string{"x"} }},
		{"--heads: address 2", func(c *Config) { c.Heads = []string{"127.0.0.1:1", "y"} }},
		{"--join and --heads are both empty", func(c *Config) { c.Join = nil }},
		{"no container runtime", func(c *Config) { c.Runtime = nil }},
		{"Capacity", func(c *Config) { c.Capacity.CPUMillis = -1 }},
		{"--max-concurrent-starts 0 is outside [1, 1024]", func(c *Config) { c.MaxConcurrentStarts = 0 }},
		{"--reconcile-interval 0s is below 10ms", func(c *Config) { c.ReconcileInterval = 0 }},
		{"--snapshot-grace 500ms is outside [1s, 168h]", func(c *Config) { c.SnapshotGrace = 500 * time.Millisecond }},
		{"--snapshot-grace 192h0m0s is outside [1s, 168h]", func(c *Config) { c.SnapshotGrace = 8 * 24 * time.Hour }},
		{"HeartbeatInterval", func(c *Config) { c.HeartbeatInterval = time.Millisecond }},
		{"--stop-grace", func(c *Config) { c.StopGrace = -time.Second }},
		{"StartTimeout", func(c *Config) { c.StartTimeout = 0 }},
		{"CallTimeout", func(c *Config) { c.CallTimeout = 0 }},
		{"BatchDelay 2s is above 1s", func(c *Config) { c.BatchDelay = 2 * time.Second }},
		{"ReconnectMax 1ms is below ReconnectMin", func(c *Config) { c.ReconnectMax = time.Millisecond }},
		{"MaxBatchEvents 0", func(c *Config) { c.MaxBatchEvents = 0 }},
		{"--tls-cert: certificate \"w2\" is worker w2's (w2.worker.megaflow), not worker w1's", func(c *Config) { c.TLS = w2 }},
		{"names no worker id (no DNS name w1.worker.megaflow): it was made before certificates named their node; reissue it with megaflow tls cert create --worker --node-id w1",
			func(c *Config) { c.TLS = old }},
		{"--tls-cert holds a head certificate", func(c *Config) { c.TLS = h1 }},
	} {
		c := good()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
		}
	}
	c = good()
	c.NodeID, c.DataDir = "", ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--node-id") || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("Validate reports one problem only: %v", err)
	}
	if _, err := New(c); err == nil || !strings.HasPrefix(err.Error(), "worker config: ") {
		t.Errorf("New(bad) = %v", err)
	}
}

func TestContainerName(t *testing.T) {
	k := func(task string, n uint32) attempt.Key { return attempt.Key{TaskID: task, Attempt: n} }
	if got := ContainerName("w1", k("graph-1/task.a", 2)); got != "mf-w1-graph-1_task.a-a2" {
		t.Errorf("plain name %q", got)
	}
	// '_' in the id would make "a_b/c" and "a/b_c" collide: hashed.
	x, y := ContainerName("w1", k("a_b/c", 1)), ContainerName("w1", k("a/b_c", 1))
	if x == y || !strings.HasSuffix(x, "-a1") {
		t.Errorf("ambiguous ids: %q and %q", x, y)
	}
	long := strings.Repeat("g", 128) + "/" + strings.Repeat("t", 128)
	n1, n2 := ContainerName("w1", k(long, 1)), ContainerName("w1", k(long+"x", 1))
	for _, n := range []string{n1, n2, x, ContainerName(strings.Repeat("w", 64), k(long, 4_000_000_000))} {
		if len(n) > maxNameLen {
			t.Errorf("%q is %d characters", n, len(n))
		}
		if !isAlnum(n[0]) {
			t.Errorf("%q starts badly", n)
		}
		for i := 0; i < len(n); i++ {
			if !isNameByte(n[i]) {
				t.Errorf("%q has %q", n, n[i])
			}
		}
	}
	if n1 == n2 {
		t.Errorf("long ids differing at the end share the name %q", n1)
	}
	if ContainerName("w1", k(long, 1)) == ContainerName("w1", k(long, 2)) {
		t.Error("attempts share a name")
	}
}

func TestLogPath(t *testing.T) {
	k := attempt.Key{TaskID: "g1/t.x", Attempt: 7}
	if got := logPath("/d", k); got != "/d/logs/g1+t.x/7.log" {
		t.Errorf("logPath = %q", got)
	}
	for _, id := range []string{"../x", "/..", "..", "a/../../b", ""} {
		p := logPath("/d", attempt.Key{TaskID: id, Attempt: 1})
		if rel, err := filepath.Rel("/d/logs", p); err != nil || strings.HasPrefix(rel, "..") || strings.Count(rel, "/") != 1 {
			t.Errorf("logPath(%q) = %q escapes or nests", id, p)
		}
	}
}

func TestParseLabels(t *testing.T) {
	f, ok := parseLabels(map[string]string{LabelTask: "g/t", LabelAttempt: "3", LabelDeadline: "1700000000000",
		LabelTimeout: "60", LabelMemory: "1024"})
	if !ok || f.key != (attempt.Key{TaskID: "g/t", Attempt: 3}) || f.deadline.UnixMilli() != 1700000000000 ||
		f.timeout != time.Minute || f.memory != 1024 {
		t.Errorf("parseLabels = %+v, %v", f, ok)
	}
	for _, l := range []map[string]string{
		{LabelTask: "g/t"}, {LabelAttempt: "1"}, {LabelTask: "g/t", LabelAttempt: "0"}, {LabelTask: "g/t", LabelAttempt: "x"},
	} {
		if _, ok := parseLabels(l); ok {
			t.Errorf("parseLabels(%v) accepted", l)
		}
	}
}

func TestParseResult(t *testing.T) {
	big := `"` + strings.Repeat("x", MaxResultBytes) + `"`
	for _, tc := range []struct {
		name, out   string
		partial     bool
		result, why string
	}{
		{"none", "hello\nworld\n", false, "", ""},
		{"last line", "a\nMEGAFLOW_RESULT {\"a\":1}\n", false, `{"a":1}`, ""},
		{"no final newline", "a\nMEGAFLOW_RESULT [1,2]", false, "[1,2]", ""},
		{"the last of several", "MEGAFLOW_RESULT 1\nx\nMEGAFLOW_RESULT 2\ny\n", false, "2", ""},
		{"crlf", "MEGAFLOW_RESULT {}\r\n", false, "{}", ""},
		{"indented is not a result", "  MEGAFLOW_RESULT 1\n", false, "", ""},
		{"invalid json", "MEGAFLOW_RESULT {oops\n", false, "", "MEGAFLOW_RESULT line ignored: not valid JSON"},
		{"too big", "MEGAFLOW_RESULT " + big + "\n", false, "", fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d", len(big), MaxResultBytes)},
		{"partial first line skipped", "RESULT 5\nok\n", true, "", ""},
		{"partial with a result after", "xx MEGAFLOW_RESULT 5\nMEGAFLOW_RESULT 6\n", true, "6", ""},
		{"only a partial line", "MEGAFLOW_RESULT 5", true, "", ""},
	} {
		r, why := parseResult([]byte(tc.out), tc.partial, MaxResultBytes)
		if string(r) != tc.result || why != tc.why {
			t.Errorf("%s: parseResult = %q, %q; want %q, %q", tc.name, r, why, tc.result, tc.why)
		}
	}
}

func TestReadResultScansTheTail(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "1.log")
	if r, why := readResult(p, MaxResultBytes); r != nil || why != "" {
		t.Errorf("missing file: %q %q", r, why)
	}
	early := "MEGAFLOW_RESULT 1\n" + strings.Repeat(strings.Repeat("z", 99)+"\n", ResultScanBytes/100+10)
	if err := os.WriteFile(p, []byte(early), 0o644); err != nil {
		t.Fatal(err)
	}
	follow := fmt.Sprintf("MEGAFLOW_RESULT line ignored: %d bytes of output follow it; the result line must be among the last %d bytes of output",
		len(early)-len("MEGAFLOW_RESULT 1\n"), ResultScanBytes)
	if r, why := readResult(p, MaxResultBytes); r != nil || why != follow {
		t.Errorf("a result line before the scanned tail: %q %q, want no result and the note %q", r, why, follow)
	}
	if err := os.WriteFile(p, []byte(early+"MEGAFLOW_RESULT {\"late\":true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, _ := readResult(p, MaxResultBytes); string(r) != `{"late":true}` {
		t.Errorf("readResult = %q", r)
	}
}

// A result line longer than the scanned tail (issue 18: a 2 MiB result
// vanished without a note), at the end of a log or before other output,
// with or without a final newline, is ignored with a note saying its size
// and the limit; a log that merely ends in a long line of other output
// gets no note.
func TestReadResultNotesAResultLongerThanTheTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "1.log")
	payload := `"` + strings.Repeat("x", 2<<20) + `"`
	note := fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d", len(payload), ResultScanBytes)
	for _, tc := range []struct {
		name, log, note string
	}{
		{"at the end", "start\nMEGAFLOW_RESULT " + payload + "\n", note},
		{"no final newline", "start\nMEGAFLOW_RESULT " + payload, note},
		{"first line of the log", "MEGAFLOW_RESULT " + payload + "\n", note},
		{"prefix across a read chunk", strings.Repeat("a", 3<<20-5) + "\nMEGAFLOW_RESULT " + payload + "\n", note},
		{"a long line of other output", "start\nnot a result " + payload + "\n", ""},
		{"a result inside a long line", "start\nsay MEGAFLOW_RESULT " + payload + "\n", ""},
	} {
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if r, why := readResult(p, ResultScanBytes); r != nil || why != tc.note {
			t.Errorf("%s: readResult = %.40q, %q; want no result and %q", tc.name, r, why, tc.note)
		}
	}
}

// An event reason over the head's bound is cut to it, and still says it
// was cut: the head refuses a batch holding a longer one.
func TestOutboxCutsLongReasons(t *testing.T) {
	o := newOutbox(1, 10)
	ev := &wire.AttemptEvent{TaskId: "g/a", Reason: strings.Repeat("é", specbound.MaxEventReasonBytes)}
	if maxEventReasonBytes != specbound.MaxEventReasonBytes {
		t.Fatalf("maxEventReasonBytes %d, the head's bound %d", maxEventReasonBytes, specbound.MaxEventReasonBytes)
	}
	o.add(ev, nil)
	if n := len(ev.GetReason()); n > specbound.MaxEventReasonBytes || !strings.HasSuffix(ev.GetReason(), cutMark) || !utf8.ValidString(ev.GetReason()) {
		t.Fatalf("reason of %d bytes, valid UTF-8 %v, ends %q", n, utf8.ValidString(ev.GetReason()), ev.GetReason()[n-10:])
	}
}

func TestParseMemTotal(t *testing.T) {
	n, err := parseMemTotal([]byte("MemFree: 1 kB\nMemTotal:       16384 kB\n"))
	if err != nil || n != 16384*1024 {
		t.Errorf("parseMemTotal = %d, %v", n, err)
	}
	for _, bad := range []string{"", "MemTotal: x kB\n", "MemTotal: 5 MB\n"} {
		if _, err := parseMemTotal([]byte(bad)); err == nil {
			t.Errorf("parseMemTotal(%q) accepted", bad)
		}
	}
	if c, err := DetectCapacity(); err != nil || c.CPUMillis < 1000 || c.MemoryBytes <= 0 {
		t.Errorf("DetectCapacity = %+v, %v", c, err)
	}
}

func TestOutbox(t *testing.T) {
	o := newOutbox(100, 2)
	ev := func(task string) *wire.AttemptEvent { return &wire.AttemptEvent{TaskId: task} }
	if o.cut() != nil {
		t.Fatal("cut of an empty outbox")
	}
	var acked []string
	for _, task := range []string{"a", "b", "c"} {
		o.add(ev(task), func() { acked = append(acked, task) })
	}
	b1, b2 := o.cut(), o.cut()
	if b1.GetSeq() != 100 || len(b1.GetEvents()) != 2 || b2.GetSeq() != 101 || len(b2.GetEvents()) != 1 || o.cut() != nil {
		t.Fatalf("batches %v %v", b1, b2)
	}
	o.add(ev("d"), nil)
	if msgs := o.unackedMessages(); len(msgs) != 2 || msgs[0].GetSeq() != 100 {
		t.Fatalf("unacked %v", msgs)
	}
	for _, f := range o.ack(100) {
		f()
	}
	if strings.Join(acked, "") != "ab" || o.unackedLen() != 1 || o.pendingLen() != 1 {
		t.Fatalf("after ack(100): acked %q, unacked %d, pending %d", acked, o.unackedLen(), o.pendingLen())
	}
	if b3 := o.cut(); b3.GetSeq() != 102 {
		t.Fatalf("third batch seq %d", b3.GetSeq())
	}
	for _, f := range o.ack(1000) {
		f()
	}
	if strings.Join(acked, "") != "abc" || o.unackedLen() != 0 {
		t.Fatalf("after ack(1000): %q %d", acked, o.unackedLen())
	}
	if len(o.ack(5)) != 0 {
		t.Error("an old ack returned callbacks")
	}
}

func TestFIFOSem(t *testing.T) {
	s := newFIFOSem(1)
	ctx := context.Background()
	if err := s.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.acquire(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			s.release()
		}()
		// Queue them one at a time, so the arrival order is known.
		waitFor(t, 5*time.Second, "queued", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.waiters) == i+1
		})
	}
	// A waiter that gives up leaves the queue.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error)
	go func() { gaveUp <- s.acquire(cctx) }()
	waitFor(t, 5*time.Second, "the sixth waiter", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiters) == 6
	})
	cancel()
	if err := within.Recv(t, 10*time.Second, gaveUp, "the cancelled acquire to return"); err == nil {
		t.Fatal("a cancelled acquire succeeded")
	}
	s.release()
	within.Wait(t, 10*time.Second, &wg, "the five queued acquires to be admitted")
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Errorf("admitted in order %v", order)
	}
	if s.free != 1 || len(s.waiters) != 0 {
		t.Errorf("semaphore left with %d free, %d waiters", s.free, len(s.waiters))
	}
}

func TestMetaFitsAndDropsLongLabels(t *testing.T) {
	cfg := testConfig(t, newFakeRT(t), t.TempDir(), "127.0.0.1:1")
	cfg.Labels = map[string]string{"zone": "a", "gpu": "h100"}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := w.meta(true)
	if m.Role != gossip.RoleWorker || m.Extra[MetaLabels] != "gpu=h100,zone=a" || m.Extra[MetaMemoryBytes] != fmt.Sprint(int64(8<<30)) {
		t.Errorf("meta = %+v", m)
	}
	_ = w.gossip.Shutdown()

	cfg.Labels = map[string]string{"long": strings.Repeat("v", 600)}
	w, err = New(cfg)
	if err != nil {
		t.Fatalf("New with labels too long for gossip: %v", err)
	}
	defer w.gossip.Shutdown()
	if got := w.info.GetLabels()["long"]; len(got) != 600 {
		t.Error("the labels must still travel in the Hello")
	}
}

// Two clusters sharing a Docker engine with the same worker ids get
// different container names; the default cluster keeps the short names.
func TestNameScopeSeparatesClusters(t *testing.T) {
	k := attempt.Key{TaskID: "g/t001", Attempt: 1}
	scope := func(cluster string) string {
		return (&Worker{cfg: Config{ClusterName: cluster, NodeID: "w1"}}).nameScope()
	}
	if got := ContainerName(scope("megaflow"), k); got != "mf-w1-g_t001-a1" {
		t.Fatalf("default cluster: %q", got)
	}
	a, b := ContainerName(scope("staging"), k), ContainerName(scope("prod"), k)
	if a == b || a != "mf-staging-w1-g_t001-a1" {
		t.Fatalf("staging %q, prod %q: want distinct names with the cluster in them", a, b)
	}
	if p, q := poolContainerName(scope("staging"), 7), poolContainerName(scope("prod"), 7); p == q {
		t.Fatalf("pool names %q and %q collide", p, q)
	}
}
