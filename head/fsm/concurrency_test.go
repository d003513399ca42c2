package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/within"
)

// TestConcurrentReaders reads views and events and writes snapshots from
// other goroutines while entries are applied and a snapshot is restored;
// run it with -race.
func TestConcurrentReaders(t *testing.T) {
	f := newTestFSM(t, 64)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cur Cursor
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := f.View()
				tasks, _, err := v.ListTasks(state.TaskFilter{Tenant: "default"}, "", 50)
				if err != nil {
					t.Error(err)
					return
				}
				for _, task := range tasks {
					_ = task.ToWire().String()
				}
				for range v.QueuedTasks("") {
				}
				evs, next, err := f.EventsAfter(cur, fmt.Sprintf("g%d", r), 10)
				if err == nil {
					cur = next
					for _, ev := range evs {
						_ = ev.String()
					}
				} else {
					cur = Cursor{}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the snapshot goroutine
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := WriteSnapshot(io.Discard, f.View()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	gen := &logGen{rng: rand.New(rand.NewSource(7)), tb: t}
	for i, e := range gen.entries(300) {
		if i == 150 {
			snap := snapshotBytes(t, f.View())
			if err := f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
				t.Fatal(err)
			}
		}
		applyAll(f, [][]byte{e}, false, nil)
	}
	close(stop)
	within.Wait(t, time.Minute, &wg, "the snapshot writers to stop")
}
