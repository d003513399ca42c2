package client

import (
	"context"
	"errors"
	"iter"
	"math"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Cursor is a position in the event history: the Raft index of an entry and
// the position of an event within it.
type Cursor struct {
	Index uint64
	Seq   uint32
}

// WatchOptions selects the events of a Watch.
type WatchOptions struct {
	// After delivers events strictly after this cursor; the zero value
	// starts at the oldest event the head retains.
	After Cursor
	// GraphID keeps only one graph's events; "" keeps all.
	GraphID string
	// FromNow starts at the live end instead.
	FromNow bool
}

// Watch streams committed events in commit order. It reconnects through
// head failures and leader changes and resumes after the last event it
// yielded, so a consumer sees no gap and no duplicate. The sequence ends
// with an error when ctx ends or when the cursor is older than the history
// the heads retain (errs.OutOfRange: re-read the state and watch from now).
func (c *Client) Watch(ctx context.Context, o WatchOptions) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		cur, fromNow := o.After, o.FromNow
		delay := c.opts.backoffMin
		for {
			addr, conn, err := c.pick()
			if err != nil {
				yield(nil, err)
				return
			}
			// Each stream has its own context, cancelled when the stream is
			// done with: a stream left open (a caller that stopped ranging,
			// as Wait does once its graph ended) would live on in the head,
			// woken by every change, until ctx ended.
			stop := false
			err = func() error {
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				stream, err := wire.NewMegaflowServiceClient(conn).Watch(sctx, &wire.WatchRequest{AfterIndex: cur.Index, AfterSeq: cur.Seq,
					GraphId: o.GraphID, FromNow: fromNow})
				for err == nil {
					var res *wire.WatchResponse
					if res, err = stream.Recv(); err != nil {
						break
					}
					delay = c.opts.backoffMin
					fromNow = false
					if len(res.Events) == 0 && cur.Index < res.AppliedIndex {
						// A heartbeat: nothing of ours up to applied; resume after it.
						cur = Cursor{Index: res.AppliedIndex, Seq: math.MaxUint32}
					}
					for _, ev := range res.Events {
						cur = Cursor{Index: ev.Index, Seq: ev.Seq}
						if !yield(ev, nil) {
							stop = true
							return nil
						}
					}
				}
				return err
			}()
			if stop {
				return
			}
			err = errs.FromStatus(err)
			if ctx.Err() != nil {
				yield(nil, ctx.Err())
				return
			}
			var e *errs.Error
			// What a retry cannot fix ends the sequence: an old cursor, a
			// bad request, a message over gRPC's size limit.
			if errors.As(err, &e) && (e.Class == errs.OutOfRange || e.Class == errs.ResourceExhausted && !errs.Retryable(err)) ||
				errors.Is(err, errs.ErrInvalidArgument) || errors.Is(err, errs.ErrNotFound) {
				yield(nil, err)
				return
			}
			c.rotate(addr)
			if !clock.Sleep(c.opts.clock, jitter(delay), ctx.Done()) {
				yield(nil, ctx.Err())
				return
			}
			delay = min(2*delay, c.opts.backoffMax)
		}
	}
}

// Wait blocks until graph id is terminal (succeeded, failed or cancelled)
// and returns it with its aggregate. Errors: errs.NotFound, or ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Graph, error) {
	for {
		g, meta, err := c.GetGraph(ctx, id, ReadOptions{})
		if err != nil {
			return nil, err
		}
		if GraphTerminal(g.State) {
			return g, nil
		}
		// Every change after the read shows up as an event after its index.
		for ev, err := range c.Watch(ctx, WatchOptions{GraphID: id, After: Cursor{Index: meta.Index, Seq: math.MaxUint32}}) {
			if err != nil {
				if errors.Is(err, errs.ErrOutOfRange) {
					break // fell behind the retained history: read again
				}
				return nil, err
			}
			if ev.TaskId == "" && GraphTerminal(ev.GraphState) {
				g, _, err := c.GetGraph(ctx, id, ReadOptions{MinIndex: ev.Index})
				return g, err
			}
		}
	}
}
