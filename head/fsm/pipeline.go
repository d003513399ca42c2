package fsm

import "sync"

// runOrdered runs a three-stage pipeline for the snapshot writer and
// reader: produce sends jobs (it returns false from send when the pipeline
// has stopped), up to workers goroutines turn them into results with work,
// and consume, on the calling goroutine, receives the results in the order
// the jobs were sent. It stops at the first error of any stage, waits for
// its goroutines, and returns that error.
func runOrdered[J, R any](workers int, produce func(send func(J) bool) error,
	work func(J) (R, error), consume func(R) error) error {
	type result struct {
		val R
		err error
	}
	type job struct {
		in  J
		out chan result
	}
	jobs := make(chan job, 2*workers)
	order := make(chan chan result, 4*workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				v, err := work(j.in)
				j.out <- result{v, err}
			}
		}()
	}
	var produceErr error
	go func() {
		defer close(order)
		defer close(jobs)
		produceErr = produce(func(in J) bool {
			// The job goes out before its slot in the order, so that every
			// slot consume waits on belongs to a job a worker will finish.
			out := make(chan result, 1)
			select {
			case jobs <- job{in, out}:
			case <-stop:
				return false
			}
			select {
			case order <- out:
				return true
			case <-stop:
				return false
			}
		})
	}()
	var err error
	for out := range order {
		r := <-out
		if err != nil {
			continue // drain
		}
		if err = r.err; err == nil {
			err = consume(r.val)
		}
		if err != nil {
			close(stop)
		}
	}
	wg.Wait()
	if err == nil {
		err = produceErr // written before order was closed
	}
	return err
}
