package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// On the real engine, a program missing from the image shows up either as
// ErrInvalidSpec from Start (an engine without an init) or, with the init
// (tini) this runtime uses, as exit code 127, which the worker classifies
// as not retryable. Either way nothing else is reported.
func TestStartMissingProgram(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("missing", "/no/such/program")
	id, err := e.rt.Start(context.Background(), spec)
	if errors.Is(err, contract.ErrInvalidSpec) {
		return
	}
	if err != nil {
		t.Fatalf("Start of a missing program: err = %v, want ErrInvalidSpec or a start", err)
	}
	defer e.rt.Remove(context.Background(), id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exit, err := e.rt.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 127 {
		t.Fatalf("exit of a missing program: %+v, want code 127", exit)
	}
}
