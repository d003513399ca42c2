package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/moby/moby/api/pkg/stdcopy"
)

// bigOutput is what `head -c 6000000 /dev/zero | base64 -w 100; echo
// MEGAFLOW_RESULT '{"reward": 1}'` prints: 80,000 lines of 100 'A's, then
// the result line (8,080,030 bytes).
func bigOutput() []byte {
	line := strings.Repeat("A", 100) + "\n"
	return []byte(strings.Repeat(line, 80000) + `MEGAFLOW_RESULT {"reward": 1}` + "\n")
}

const bigScript = `head -c 6000000 /dev/zero | base64 -w 100; echo MEGAFLOW_RESULT '{"reward": 1}'`

// A container printing 8 MB at once: Docker 20.10's follow stream ends
// early under such output (moby/moby#41820; 5.9 of 8.1 MB were copied), so
// the log file must be completed from the engine's stored log.
func TestLargeOutputIsComplete(t *testing.T) {
	t.Parallel() // it waits for the engine, beside the other waiting tests
	e := newEnv(t)
	want := bigOutput()
	for i := range 3 {
		spec := e.spec("big"+string(rune('a'+i)), "sh", "-c", bigScript)
		exit := e.wait(e.start(spec))
		if exit.Code != 0 || exit.Reason != "" {
			t.Fatalf("exit %+v, want 0 with no reason", exit)
		}
		got, err := os.ReadFile(spec.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("run %d: log has %d bytes, want %d (%s)", i, len(got), len(want), firstDiff(got, want))
		}
	}
}

// A worker restarted while its container runs resumes the copy from the
// bytes its log file holds (Adopt), and the log ends complete: nothing
// twice, nothing missing.
func TestAdoptResumesTheLog(t *testing.T) {
	t.Parallel() // it waits for the engine, beside the other waiting tests
	e := newEnv(t)
	script := `i=0; while [ $i -lt 40 ]; do echo line $i; i=$((i+1)); sleep 0.05; done; ` + bigScript
	spec := e.spec("adopt", "sh", "-c", script)
	first := e.fresh()
	id, err := first.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rt.Remove(context.Background(), id) })
	// The first runtime dies (a crash of the worker) once some output is
	// in the file; the container keeps running.
	waitFor(t, 30*time.Second, "some output in the log", func() bool {
		b, _ := os.ReadFile(spec.LogPath)
		return bytes.Contains(b, []byte("line 3\n"))
	})
	first.Close()
	before, _ := os.ReadFile(spec.LogPath)
	waitFor(t, 30*time.Second, "more output than the log holds", func() bool {
		rc, err := e.rt.Logs(context.Background(), id, false)
		if err != nil {
			return false
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return len(b) > len(before)+100
	})
	rt := e.rt
	if err := rt.Adopt(context.Background(), id, spec.LogPath); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exit, err := rt.Wait(ctx, id)
	if err != nil || exit.Code != 0 || exit.Reason != "" {
		t.Fatalf("Wait: %+v, %v; want code 0 with no reason", exit, err)
	}
	var want bytes.Buffer
	for i := range 40 {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	want.Write(bigOutput())
	got := readFile(t, spec.LogPath)
	if got != want.String() {
		t.Fatalf("log has %d bytes (%d before the adoption), want %d (%s)", len(got), len(before), want.Len(), firstDiff([]byte(got), want.Bytes()))
	}
}

// Adopting a container that already exited completes its log at once.
func TestAdoptExited(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("exited", "sh", "-c", "echo one; echo two; echo three")
	id := e.start(spec)
	e.wait(id)
	if err := os.WriteFile(spec.LogPath, []byte("one\n"), 0o644); err != nil { // what a crashed worker had copied
		t.Fatal(err)
	}
	rt := e.rt
	if err := rt.Adopt(context.Background(), id, spec.LogPath); err != nil {
		t.Fatal(err)
	}
	exit, err := rt.Wait(context.Background(), id)
	if err != nil || exit.Code != 0 || exit.Reason != "" {
		t.Fatalf("Wait: %+v, %v", exit, err)
	}
	if got := readFile(t, spec.LogPath); got != "one\ntwo\nthree\n" {
		t.Fatalf("log %q", got)
	}
	// A log that does not continue the engine's is said to be incomplete.
	if err := os.WriteFile(spec.LogPath, []byte("xyz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rt.Adopt(context.Background(), id, spec.LogPath); err != nil {
		t.Fatal(err)
	}
	exit, err = rt.Wait(context.Background(), id)
	if err != nil || !strings.Contains(exit.Reason, "output is incomplete") {
		t.Fatalf("Wait: %+v, %v; want a reason saying the output is incomplete", exit, err)
	}
}

// firstDiff describes where got and want first differ.
func firstDiff(got, want []byte) string {
	n := min(len(got), len(want))
	for i := range n {
		if got[i] != want[i] {
			return "first difference at byte " + strconv.Itoa(i)
		}
	}
	return "one is a prefix of the other"
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// demux gives the payloads in order however the stream is cut into reads,
// and drops a frame the stream ends within.
func TestDemux(t *testing.T) {
	var stream, want bytes.Buffer
	frame := func(typ stdcopy.StdType, payload string) {
		hdr := [8]byte{byte(typ)}
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
		stream.Write(hdr[:])
		stream.WriteString(payload)
		want.WriteString(payload)
	}
	// 200 frames of growing sizes, about 245 KB in all: several times
	// demux's 64 KiB buffer, so that frames straddle its reads. (They
	// were 7 times larger, 2 MB with the big frame: the one-byte reader
	// took 28 s of it under -race for the same cases.)
	for i := range 200 {
		typ := stdcopy.Stdout
		if i%3 == 0 {
			typ = stdcopy.Stderr
		}
		frame(typ, strings.Repeat(strconv.Itoa(i), i*5)+"\n")
	}
	big := strings.Repeat("z", 80<<10) // larger than demux's buffer (64 KiB)
	frame(stdcopy.Stdout, big)
	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(stream.Bytes()),
		"one byte": iotest.OneByteReader(bytes.NewReader(stream.Bytes())),
		"half":     iotest.HalfReader(bytes.NewReader(stream.Bytes())),
	} {
		var got bytes.Buffer
		if err := demux(&got, r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("%s: %d bytes, want %d (%s)", name, got.Len(), want.Len(), firstDiff(got.Bytes(), want.Bytes()))
		}
	}
	var got bytes.Buffer
	cut := stream.Bytes()[:stream.Len()-10]
	if err := demux(&got, bytes.NewReader(cut)); err != nil || got.Len() != want.Len()-len(big) {
		t.Fatalf("cut stream: %d bytes, %v; want %d (the last frame dropped)", got.Len(), err, want.Len()-len(big))
	}
}

// logWriter skips what the file holds while following, and the final
// (verifying) stream repairs the file from the first byte that differs
// and cuts repeats beyond its end.
func TestLogWriter(t *testing.T) {
	for _, tc := range []struct {
		name, follow, final, want string
	}{
		{"follow stopped early", "hello wo", "hello world\n", "hello world\n"},
		{"follow repeated a line", "hello\nhello\nworld\n", "hello\nworld\n", "hello\nworld\n"},
		{"follow had it all", "hello world\n", "hello world\n", "hello world\n"},
		{"follow longer at the end", "hello world\nworld\n", "hello world\n", "hello world\n"},
	} {
		path := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(path, []byte("before\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := &logWriter{f: f, base: 7}
		// The follow stream in two pieces, then again from the start
		// (another follow stream), then the final read.
		w.Write([]byte(tc.follow[:3]))
		w.Write([]byte(tc.follow[3:]))
		w.rewind()
		w.Write([]byte(tc.follow[:5]))
		w.rewind()
		w.verify = true
		for i := 0; i < len(tc.final); i += 4 {
			w.Write([]byte(tc.final[i:min(i+4, len(tc.final))]))
		}
		if err := w.finish(); err != nil {
			t.Fatalf("%s: finish: %v", tc.name, err)
		}
		f.Close()
		if got := readFile(t, path); got != "before\n"+tc.want || w.n != int64(len(tc.want)) {
			t.Errorf("%s: file %q, n %d; want %q", tc.name, got, w.n, "before\n"+tc.want)
		}
	}
}

// The final read of an engine that rotated the output's first bytes away
// starts mid-output: it is placed where its first bytes are in the copy,
// and the copy's bytes before them kept; a follow stream that lost bytes
// across the rotation gets the engine's tail (the result line) all the
// same. Found by a fault trial: a result printed after 40 MB was dropped
// (the copy was left as it was), and a log whose first line began as the
// engine's did lost its first 44% (taken for a follow stream's glitch).
func TestLogWriterAfterARotation(t *testing.T) {
	var numbers strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&numbers, "%d xxxxxxxx\n", i)
	}
	all := numbers.String()
	from1500 := all[strings.Index(all, "\n1500 ")+1:]
	long := func(c string) string { return strings.Repeat(c, alignBytes+900) + "\n" }
	const note = "\nmegaflow: output is missing here: the engine rotated it away before it was copied (raise the engine's log max-size); what follows is the engine's retained log\n"
	for _, tc := range []struct {
		name, follow, final, want string
		gap                       bool // the log is said to be incomplete
	}{
		{"the copy holds it all", "line one\nline two\nline three\n", "line three\n", "line one\nline two\nline three\n", true},
		{"the follow stream lost the tail", "START\nline one\nline two\n", "line one\nline two\nEND\nMEGAFLOW_RESULT {}\n",
			"START\nline one\nline two\nEND\nMEGAFLOW_RESULT {}\n", true},
		{"the engine's first line begins as the copy's", all, from1500 + "MEGAFLOW_RESULT 1\n", all + "MEGAFLOW_RESULT 1\n", true},
		{"lines longer than alignBytes", "h\n" + long("b") + long("c"), long("b") + long("c") + "R\n", "h\n" + long("b") + long("c") + "R\n", true},
		{"the copy lacks the engine's first lines", all[:strings.Index(all, "\n1490 ")+1] + all[strings.Index(all, "\n1510 ")+1:],
			from1500 + "MEGAFLOW_RESULT 1\n", all[:strings.Index(all, "\n1490 ")+1] + from1500 + "MEGAFLOW_RESULT 1\n", true},
		{"the copy holds none of the engine's", "a\nb\n", "y\nz\nMEGAFLOW_RESULT {}\n", "a\nb\n" + note + "y\nz\nMEGAFLOW_RESULT {}\n", true},
		{"nothing copied: the engine's as it is", "", "y\nz\n", "y\nz\n", false},
		// Repeated lines the engine rotated: its log is the copy's start,
		// far shorter; the copy is not cut to it.
		{"repeated lines, rotated", strings.Repeat("a\n", 1<<20), strings.Repeat("a\n", 1000), strings.Repeat("a\n", 1<<20), true},
		// A follow stream's repeats at the end are still cut.
		{"a few repeats at the end", "line one\nline two\nline two\n", "line one\nline two\n", "line one\nline two\n", false},
	} {
		path := filepath.Join(t.TempDir(), "log")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		w := &logWriter{f: f}
		for i := 0; i < len(tc.follow); i += 1000 {
			w.Write([]byte(tc.follow[i:min(i+1000, len(tc.follow))]))
		}
		w.rewind()
		w.verify = true
		for i := 0; i < len(tc.final); i += 7 {
			w.Write([]byte(tc.final[i:min(i+7, len(tc.final))]))
		}
		err = w.finish()
		f.Close()
		if got := readFile(t, path); got != tc.want || w.n != int64(len(tc.want)) {
			t.Errorf("%s: file of %d bytes, n %d; want %d bytes (%s)", tc.name, len(got), w.n, len(tc.want), firstDiff([]byte(got), []byte(tc.want)))
		}
		if (err != nil) != tc.gap {
			t.Errorf("%s: finish: %v; want an error: %v", tc.name, err, tc.gap)
		}
	}
}

// The log file, and the directories its path names, come with the first
// byte of output (contract.Spec.LogPath): a container or an exec that
// prints nothing leaves neither; one that prints gets its file.
func TestLogFileOnFirstOutputOnly(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	silent := e.spec("silent", "true")
	silent.LogPath = filepath.Join(e.dir, "logs", "g+silent", "1.log")
	if exit := e.wait(e.start(silent)); exit.Code != 0 || exit.Reason != "" {
		t.Fatalf("silent exit %+v", exit)
	}
	noDir(t, silent.LogPath)

	loud := e.spec("loud", "echo", "hi")
	loud.LogPath = filepath.Join(e.dir, "logs", "g+loud", "1.log")
	e.wait(e.start(loud))
	if got := readFile(t, loud.LogPath); got != "hi\n" {
		t.Fatalf("log %q", got)
	}

	warm := e.start(e.spec("warm", "sleep", "600"))
	ex := contract.Spec{Command: []string{"true"}, LogPath: filepath.Join(e.dir, "logs", "g+exec", "1.log")}
	if exit, err := e.rt.Exec(ctx, warm, ex); err != nil || exit.Code != 0 {
		t.Fatalf("silent exec: %+v, %v", exit, err)
	}
	noDir(t, ex.LogPath)
	ex.Command = []string{"echo", "from exec"}
	if exit, err := e.rt.Exec(ctx, warm, ex); err != nil || exit.Code != 0 {
		t.Fatalf("exec: %+v, %v", exit, err)
	}
	if got := readFile(t, ex.LogPath); got != "from exec\n" {
		t.Fatalf("exec log %q", got)
	}
}

// A worker restarted while its container had printed nothing yet (no log
// file, no directory) adopts it, and the output it prints afterwards fills
// a new file, whole.
func TestAdoptBeforeAnyOutput(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := e.spec("quiet", "sh", "-c", "while [ ! -f /tmp/gate ]; do sleep 0.05; done; echo one; echo two")
	spec.LogPath = filepath.Join(e.dir, "logs", "g+quiet", "1.log")
	first := e.fresh()
	id, err := first.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rt.Remove(context.Background(), id) })
	first.Close() // the worker's crash, before any output
	noDir(t, spec.LogPath)
	if err := e.rt.Adopt(ctx, id, spec.LogPath); err != nil {
		t.Fatal(err)
	}
	noDir(t, spec.LogPath)
	if exit, err := e.rt.Exec(ctx, id, contract.Spec{Command: []string{"touch", "/tmp/gate"}}); err != nil || exit.Code != 0 {
		t.Fatalf("opening the gate: %+v, %v", exit, err)
	}
	exit, err := e.rt.Wait(ctx, id)
	if err != nil || exit.Code != 0 || exit.Reason != "" {
		t.Fatalf("Wait: %+v, %v; want code 0 with no reason", exit, err)
	}
	if got := readFile(t, spec.LogPath); got != "one\ntwo\n" {
		t.Fatalf("log %q", got)
	}
}

// noDir fails the test unless the directory of log file path is missing.
func noDir(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: %v; want no log directory (nothing was printed)", filepath.Dir(path), err)
	}
}
