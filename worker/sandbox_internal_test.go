package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
	mfspec "github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// The idle timer counts from the first time the sandbox is seen running
// or its last exec's end; an exec in flight keeps it busy; it fires once.
func TestSandboxBoxIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := &sandboxBox{idle: 10 * time.Second}
	if _, idle := b.idleFor(t0); idle {
		t.Fatal("idle at first sight")
	}
	if _, idle := b.idleFor(t0.Add(9 * time.Second)); idle {
		t.Fatal("idle before its timeout")
	}
	if err := b.begin("sbx-a", t0.Add(9*time.Second)); err != nil {
		t.Fatalf("begin refused: %v", err)
	}
	if _, idle := b.idleFor(t0.Add(time.Hour)); idle {
		t.Fatal("idle while an exec runs")
	}
	b.end(t0.Add(time.Hour))
	if _, idle := b.idleFor(t0.Add(time.Hour + 9*time.Second)); idle {
		t.Fatal("idle 9 s after the last exec ended")
	}
	d, idle := b.idleFor(t0.Add(time.Hour + 10*time.Second))
	if !idle || d != 10*time.Second {
		t.Fatalf("10 s after the last exec: idle %v for %v; want idle for 10s", idle, d)
	}
	if _, idle := b.idleFor(t0.Add(2 * time.Hour)); idle {
		t.Fatal("fired twice")
	}
	if err := b.begin("sbx-a", t0.Add(2*time.Hour)); err == nil {
		t.Fatal("an exec began in an expired sandbox")
	}
	never := &sandboxBox{}
	never.idleFor(t0)
	if _, idle := never.idleFor(t0.Add(1000 * time.Hour)); idle {
		t.Fatal("a sandbox without idle timeout expired")
	}
}

// A paused box refuses calls (SANDBOX_PAUSED) and is never idle; a pause
// is refused while a call is in flight (SANDBOX_BUSY); the idle timer
// counts afresh from the resume.
func TestSandboxBoxPause(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := &sandboxBox{idle: 10 * time.Second}
	b.idleFor(t0) // seen running: the count starts
	if err := b.begin("sbx-a", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.markPaused("sbx-a"); errs.ClassOf(err) != errs.FailedPrecondition || errs.ReasonOf(err) != mfspec.ReasonSandboxBusy {
		t.Fatalf("pause with a call in flight: %v; want FailedPrecondition, %s", err, mfspec.ReasonSandboxBusy)
	}
	b.end(t0.Add(2 * time.Second))
	for range 2 { // a second pause is no error
		if err := b.markPaused("sbx-a"); err != nil {
			t.Fatalf("pause: %v", err)
		}
	}
	err := b.begin("sbx-a", t0.Add(3*time.Second))
	if errs.ClassOf(err) != errs.FailedPrecondition || errs.ReasonOf(err) != mfspec.ReasonSandboxPaused || !strings.Contains(err.Error(), "megaflow sandbox resume sbx-a") {
		t.Fatalf("a call in a paused sandbox: %v; want FailedPrecondition, %s, saying to resume it", err, mfspec.ReasonSandboxPaused)
	}
	if _, idle := b.idleFor(t0.Add(time.Hour)); idle || !b.isPaused() {
		t.Fatal("a paused sandbox went idle")
	}
	b.unmarkPaused(t0.Add(time.Hour))
	if _, idle := b.idleFor(t0.Add(time.Hour + 9*time.Second)); idle || b.isPaused() {
		t.Fatal("idle 9 s after the resume")
	}
	if d, idle := b.idleFor(t0.Add(time.Hour + 10*time.Second)); !idle || d != 10*time.Second {
		t.Fatalf("10 s after the resume: idle %v for %v; want idle for 10s", idle, d)
	}
	if err := b.markPaused("sbx-a"); errs.ClassOf(err) != errs.FailedPrecondition {
		t.Fatalf("pause of an expired sandbox: %v; want FailedPrecondition", err)
	}
}

// An exec's output is sent in chunks, stdout and stderr apart, each
// stream cut at the limit with truncated set.
func TestExecOutTruncates(t *testing.T) {
	var got [2]bytes.Buffer
	msgs := 0
	o := &execOut{limit: execChunk + 10, send: func(m *wire.SandboxExecResponse) error {
		msgs++
		if len(m.GetStdout())+len(m.GetStderr()) > execChunk {
			t.Fatalf("a message of %d bytes; want at most %d", len(m.GetStdout())+len(m.GetStderr()), execChunk)
		}
		got[0].Write(m.GetStdout())
		got[1].Write(m.GetStderr())
		return nil
	}}
	out, errw := o.writer(false), o.writer(true)
	if n, err := out.Write([]byte(strings.Repeat("a", execChunk+5))); n != execChunk+5 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	errw.Write([]byte("err"))
	if o.truncated() {
		t.Fatal("truncated under the limit")
	}
	out.Write([]byte("0123456789"))
	if !o.truncated() || got[0].Len() != execChunk+10 || got[1].String() != "err" || msgs != 4 {
		t.Fatalf("truncated %v, stdout %d bytes, stderr %q, %d messages; want truncated, %d, \"err\", 4", o.truncated(), got[0].Len(), got[1].String(), msgs, execChunk+10)
	}
	if !strings.HasSuffix(got[0].String(), "a01234") {
		t.Fatalf("stdout ends %q; want the first bytes of the last write kept", got[0].String()[got[0].Len()-8:])
	}
}

// runtimeErr classifies a runtime's errors for the wire: the caller's
// (missing file, too large), the sandbox's (container gone or stopped),
// and the engine's own, which are retryable (Unavailable,
// RUNTIME_UNAVAILABLE) whether it did not answer or failed the call.
func TestRuntimeErrClasses(t *testing.T) {
	for _, tc := range []struct {
		err    error
		class  errs.Class
		reason string
	}{
		{fmt.Errorf("read /x: %w", contract.ErrNoSuchFile), errs.NotFound, ReasonFileNotFound},
		{fmt.Errorf("read /x: %w", contract.ErrFileTooLarge), errs.FailedPrecondition, ReasonFileTooLarge},
		{fmt.Errorf("exec: %w", contract.ErrNotFound), errs.FailedPrecondition, ""},
		{errors.New("container abc is not running"), errs.FailedPrecondition, ""},
		// A read-only root (an admission policy): the caller must use
		// execs, so not the engine's retryable failure.
		{errors.New("docker copy into abc: Error response from daemon: container rootfs is marked read-only"), errs.FailedPrecondition, ""},
		{fmt.Errorf("dial: %w", contract.ErrUnavailable), errs.Unavailable, ReasonRuntimeUnavailable},
		{errors.New("docker exec attach in abc: unable to upgrade to tcp, received 500"), errs.Unavailable, ReasonRuntimeUnavailable},
	} {
		got := runtimeErr("sbx-x", tc.err)
		if errs.ClassOf(got) != tc.class || errs.ReasonOf(got) != tc.reason {
			t.Errorf("runtimeErr(%v) = %v (class %v, reason %q); want class %v, reason %q", tc.err, got, errs.ClassOf(got), errs.ReasonOf(got), tc.class, tc.reason)
		}
	}
	if err := runtimeErr("sbx-x", context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("runtimeErr(context.Canceled) = %v; want it unchanged", err)
	}
}
