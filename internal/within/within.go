// Package within is how tests wait for something that another goroutine
// does: each function waits for one thing for at most a given time and,
// when it does not come, fails the test naming what it waited for and how
// long, instead of hanging until go test's -timeout kills the whole test
// binary with nothing but a goroutine dump. Only tests and test helpers
// import it.
package within

import (
	"sync"
	"testing"
	"time"
)

// Recv returns the next value received from ch, or ch's zero value once
// ch is closed, waiting at most d. After d it fails t (FailNow) with
// "timed out after d waiting for what". Call it from the test's goroutine
// (or a Cleanup), as t.FailNow requires.
func Recv[T any](t testing.TB, d time.Duration, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// Send sends v on ch, waiting at most d for a receiver (or room in ch's
// buffer). After d it fails t (FailNow) with "timed out after d waiting
// to send what". Call it from the test's goroutine.
func Send[T any](t testing.TB, d time.Duration, ch chan<- T, v T, what string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ch <- v:
	case <-timer.C:
		t.Fatalf("timed out after %v waiting to send %s", d, what)
	}
}

// Wait waits for wg, at most d. After d it fails t (FailNow) with "timed
// out after d waiting for what"; the goroutine that waits on wg for it is
// then left behind, blocked with the goroutines the test failed to end.
// Call it from the test's goroutine (or a Cleanup).
func Wait(t testing.TB, d time.Duration, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { // ends with wg; abandoned only when the test fails
		wg.Wait()
		close(done)
	}()
	Recv(t, d, done, what)
}
