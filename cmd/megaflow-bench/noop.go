package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// noopRuntime is a contract.Runtime whose every container exits 0 the
// moment it starts, and which keeps only the containers not yet removed:
// the soak's workers run a million tasks through it. (runtime/fake records
// every call with its spec for the tests, which over a million tasks is
// gigabytes in the harness's process.)
type noopRuntime struct {
	mu   sync.Mutex
	seq  uint64
	ctrs map[string]*contract.Container // by id
}

func newNoopRuntime() *noopRuntime { return &noopRuntime{ctrs: map[string]*contract.Container{}} }

// Name implements contract.Runtime.
func (r *noopRuntime) Name() string { return "noop" }

// Start records a container that has exited 0. Errors: contract.ErrConflict
// when a container not yet removed has spec's name.
func (r *noopRuntime) Start(ctx context.Context, spec contract.Spec) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("noop start %s: %w", spec.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if spec.Name != "" {
		for _, c := range r.ctrs {
			if c.Name == spec.Name {
				return "", fmt.Errorf("noop start %s: %w", spec.Name, contract.ErrConflict)
			}
		}
	}
	r.seq++
	now := time.Now()
	c := &contract.Container{ID: fmt.Sprintf("noop-%08d", r.seq), Name: spec.Name, Labels: maps.Clone(spec.Labels),
		Exit: &contract.Exit{StartedAt: now, FinishedAt: now}}
	r.ctrs[c.ID] = c
	return c.ID, nil
}

func (r *noopRuntime) get(op, id string) (*contract.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("noop %s %s: %w", op, id, contract.ErrNotFound)
	}
	return c, nil
}

// Wait returns the container's exit (code 0). Errors: contract.ErrNotFound.
func (r *noopRuntime) Wait(_ context.Context, id string) (contract.Exit, error) {
	c, err := r.get("wait", id)
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	return *c.Exit, nil
}

// Stop does nothing: the container has exited. Errors: contract.ErrNotFound.
func (r *noopRuntime) Stop(_ context.Context, id string, _ time.Duration) error {
	_, err := r.get("stop", id)
	return err
}

// Remove forgets the container; removing an unknown one is not an error.
func (r *noopRuntime) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ctrs, id)
	return nil
}

// List returns the containers not yet removed whose labels include match.
func (r *noopRuntime) List(_ context.Context, match map[string]string) ([]contract.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []contract.Container
	for _, c := range r.ctrs {
		ok := true
		for k, v := range match {
			if c.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			cc := *c
			cc.Labels = maps.Clone(c.Labels)
			ex := *c.Exit
			cc.Exit = &ex
			out = append(out, cc)
		}
	}
	return out, nil
}
