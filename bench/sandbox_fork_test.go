package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/worker"
)

// The fork benchmark (issue 20; docs/sandboxes.md, "Snapshots and forks";
// bench/results/sandbox.md): n sandboxes prepared by one setup, snapshot
// and n forks, against n fresh sandboxes each running the setup itself.

// forkSetup is the setup both arms of BenchmarkSandboxFork run: the work
// that preparing a sandbox stands for (fetch a package, unpack it, index
// it), in the busybox test image. It waits sleep (a download's network
// wait), writes files source-like text files of 1 MiB each under
// /work/src (base64 of 768 KiB from /dev/urandom, so gzip has work to do
// and no two runs are alike), packs them into a gzipped tar
// /work/pkg.tgz, unpacks that into /work/env, writes the sha256 of every
// file of /work/env to /work/env.sha256, and removes /work/src and the
// tar: what is left is /work/env (files MiB) and its manifest.
type forkSetup struct {
	files int
	sleep time.Duration
}

// script is the setup as one `sh -c` command.
func (f forkSetup) script() string {
	return fmt.Sprintf(`set -e
sleep %.3f
mkdir -p /work/src /work/env
i=0
while [ $i -lt %d ]; do head -c 786432 /dev/urandom | base64 > /work/src/mod$i.py; i=$((i+1)); done
tar czf /work/pkg.tgz -C /work/src .
tar xzf /work/pkg.tgz -C /work/env
cd /work/env && find . -type f | sort | xargs sha256sum > /work/env.sha256
rm -rf /work/src /work/pkg.tgz`, f.sleep.Seconds(), f.files)
}

// check is the command that passes only where the setup's files are all
// there and intact: every file of the manifest hashes to its sum, and
// /work/env holds exactly the files the setup wrote.
func (f forkSetup) check() string {
	return fmt.Sprintf(`cd /work/env && sha256sum -c -s /work/env.sha256 && [ "$(ls | wc -l)" -eq %d ]`, f.files)
}

// forkSandboxSpec is a sandbox of either arm: one core like the other
// sandbox benchmarks, and 512 MiB so that the setup's page cache (some
// 100 MiB written) is not reclaimed under a tight limit, which would
// measure writeback instead of the setup. from is a snapshot id or "".
func (s *sandboxBench) forkSandboxSpec(from string) client.SandboxSpec {
	sp := client.SandboxSpec{Image: s.image, CPUMillis: 1000, MemoryBytes: 512 << 20, WaitReady: 5 * time.Minute}
	if from != "" {
		sp.Image, sp.FromSnapshot = "", from
	}
	return sp
}

// shExec runs `sh -c cmd` in sb and fails unless it exits 0 within 5
// minutes; it returns how long the exec took. Safe from any goroutine.
func shExec(ctx context.Context, sb *client.Sandbox, what, cmd string) (time.Duration, error) {
	t0 := time.Now()
	res, err := sb.Exec(ctx, []string{"/bin/sh", "-c", cmd}, client.ExecOptions{Timeout: 5 * time.Minute})
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%s in %s: %w", what, sb.ID(), err)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return d, fmt.Errorf("%s in %s: exit %d (timed out %v): %s%s", what, sb.ID(), res.ExitCode, res.TimedOut, res.Stdout, res.Stderr)
	}
	return d, nil
}

// allAtOnce runs do(i) for i in [0, n) from n goroutines and returns the
// time until the last ended and the first error.
func allAtOnce(n int, do func(i int) error) (time.Duration, error) {
	errsOf := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Go(func() { errsOf[i] = do(i) })
	}
	wg.Wait()
	return time.Since(t0), errors.Join(errsOf...)
}

// closeAll closes boxes (nil entries skipped) from one goroutine each,
// then waits until the engine holds no container of the cluster (each
// close removes one asynchronously), so that no removal is in flight
// during the next timed arm.
func (s *sandboxBench) closeAll(ctx context.Context, boxes []*client.Sandbox) error {
	if _, err := allAtOnce(len(boxes), func(i int) error {
		if boxes[i] == nil {
			return nil
		}
		return boxes[i].Close(ctx)
	}); err != nil {
		return fmt.Errorf("closing sandboxes: %w", err)
	}
	return waitUntil(ctx, 3*time.Minute, "the closed sandboxes' containers are removed", func() (bool, string) {
		left := s.containersLeft(ctx)
		return len(left) == 0, fmt.Sprintf("%d left: %v", len(left), left)
	})
}

// deleteSnapshot deletes snapshot id once its closed forks' containers
// are gone (SNAPSHOT_IN_USE is retried until then) and waits until the
// engine no longer holds its image.
func (s *sandboxBench) deleteSnapshot(ctx context.Context, id string) error {
	var last error
	if err := waitUntil(ctx, 2*time.Minute, "DeleteSnapshot "+id+" succeeds", func() (bool, string) {
		last = s.cl.DeleteSnapshot(ctx, id)
		if last != nil && errs.ReasonOf(last) != client.ReasonSnapshotInUse {
			return true, "" // fails below
		}
		return last == nil, fmt.Sprint(last)
	}); err != nil {
		return err
	}
	if last != nil {
		return fmt.Errorf("DeleteSnapshot %s: %w", id, last)
	}
	return waitUntil(ctx, time.Minute, "the snapshot's image is removed", func() (bool, string) {
		left := s.snapshotImagesLeft()
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// containersLeft names the containers of the cluster the engine holds
// (mf-... names), or says why it could not list them.
func (s *sandboxBench) containersLeft(ctx context.Context) []string {
	cs, err := s.rt.List(ctx, map[string]string{worker.LabelCluster: s.cluster})
	if err != nil {
		return []string{"(list: " + err.Error() + ")"}
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// snapshotImagesLeft lists the cluster's snapshot images
// (megaflow-snapshot:...) the engine holds, as `docker images` prints
// them, or says why it could not list them.
func (s *sandboxBench) snapshotImagesLeft() []string {
	out, err := exec.Command(s.cli, "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}",
		"--filter", "label="+worker.LabelSnapshot, "--filter", "label="+worker.LabelCluster+"="+s.cluster).CombinedOutput()
	if err != nil {
		return []string{fmt.Sprintf("(docker images: %v: %s)", err, out)}
	}
	return strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == '\n' })
}

// waitUntil polls cond every 250 ms until it holds, for at most timeout;
// then it returns an error naming what was awaited and cond's last word.
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s: %s", timeout, what, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (%s)", what, ctx.Err(), why)
		case <-tick.C:
		}
	}
}

// forkRep is what one repetition of BenchmarkSandboxFork measured.
type forkRep struct {
	alone  time.Duration // arm A, untimed part: the source's create and setup
	setupA time.Duration // arm A, untimed part: the source's setup exec (alone on the cluster)
	snap   time.Duration // arm A: Snapshot
	forks  time.Duration // arm A: n forks READY and checked
	fresh  time.Duration // arm B: n fresh sandboxes READY, set up and checked
	setupB time.Duration // arm B: the median of its n setup execs
	size   int64         // the snapshot image's size in bytes, its base image included
}

// forkArm runs arm A once: a sandbox set up (untimed), a snapshot of it,
// n forks from it at once each checked; then it closes them all and
// deletes the snapshot (untimed).
func (s *sandboxBench) forkArm(ctx context.Context, n int, setup forkSetup, r *forkRep) error {
	t0 := time.Now()
	src, err := s.cl.CreateSandbox(ctx, s.forkSandboxSpec(""))
	if err != nil {
		return fmt.Errorf("CreateSandbox (the source): %w", err)
	}
	boxes := []*client.Sandbox{src}
	defer func() { _ = s.closeAll(ctx, boxes) }() // on an error
	if r.setupA, err = shExec(ctx, src, "the setup", setup.script()); err != nil {
		return err
	}
	r.alone = time.Since(t0)

	t0 = time.Now()
	snap, err := src.Snapshot(ctx, "forkbench")
	if err != nil {
		return fmt.Errorf("Snapshot of %s: %w", src.ID(), err)
	}
	r.snap, r.size = time.Since(t0), snap.GetSizeBytes()
	forks := make([]*client.Sandbox, n)
	r.forks, err = allAtOnce(n, func(i int) error {
		f, err := s.cl.CreateSandbox(ctx, s.forkSandboxSpec(snap.GetId()))
		if err != nil {
			return fmt.Errorf("fork %d: %w", i, err)
		}
		forks[i] = f
		if st := f.Info().GetState(); st != client.SandboxReady {
			return fmt.Errorf("fork %s is %s; want READY", f.ID(), st)
		}
		_, err = shExec(ctx, f, "the check", setup.check())
		return err
	})
	boxes = append(boxes, forks...)
	if err != nil {
		return err
	}
	if err := s.closeAll(ctx, boxes); err != nil {
		return err
	}
	boxes = nil
	return s.deleteSnapshot(ctx, snap.GetId())
}

// freshArm runs arm B once: n fresh sandboxes at once, each set up and
// checked; then it closes them (untimed).
func (s *sandboxBench) freshArm(ctx context.Context, n int, setup forkSetup, r *forkRep) error {
	boxes := make([]*client.Sandbox, n)
	setups := make([]time.Duration, n)
	var err error
	r.fresh, err = allAtOnce(n, func(i int) error {
		sb, err := s.cl.CreateSandbox(ctx, s.forkSandboxSpec(""))
		if err != nil {
			return fmt.Errorf("fresh sandbox %d: %w", i, err)
		}
		boxes[i] = sb
		if setups[i], err = shExec(ctx, sb, "the setup", setup.script()); err != nil {
			return err
		}
		_, err = shExec(ctx, sb, "the check", setup.check())
		return err
	})
	if cerr := s.closeAll(ctx, boxes); err == nil {
		err = cerr
	}
	slices.Sort(setups)
	r.setupB = setups[n/2]
	return err
}

// BenchmarkSandboxFork measures what forking saves (issue 20): arm A sets
// up one sandbox (untimed: "one setup alone"), snapshots it and creates n
// forks from the snapshot at once, each waited for until READY and then
// checked (forkSetup.check: the setup's files are there and intact),
// timed from the snapshot call to the last check; arm B creates n fresh
// sandboxes at once and runs the setup and the check in each, timed until
// the last check. The setup (forkSetup) is scaled by -megaflow.scale
// with n. 3 repetitions on one cluster, the arms alternating which goes
// first; each arm closes its sandboxes (and A deletes its snapshot) and
// waits until their containers and image are gone, untimed, before the
// next arm starts. Reported as min / median / max over the repetitions;
// the ratio A / B is the figure to quote. At the end the engine must hold
// no container and no snapshot image of the cluster.
func BenchmarkSandboxFork(b *testing.B) {
	n := scaled(16, 2)
	setup := forkSetup{files: scaled(32, 2), sleep: time.Duration(scaled(3000, 100)) * time.Millisecond}
	var (
		rows    []row
		sizeMiB float64 // the snapshot image, as the engine sizes it (the 2 MB test image included)
	)
	b.Run(fmt.Sprintf("forks=%d", n), func(b *testing.B) {
		hideNsPerOp(b)
		for range b.N {
			s := newSandboxBench(b)
			b.Cleanup(func() { // on a failure: what the arms did not remove (runs before newSandboxBench's cleanup)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cs, _ := s.rt.List(ctx, map[string]string{worker.LabelCluster: s.cluster})
				for _, c := range cs {
					_ = s.rt.Remove(ctx, c.ID)
				}
				for _, im := range s.snapshotImagesLeft() {
					if f := strings.Fields(im); len(f) == 2 {
						_ = exec.Command(s.cli, "rmi", "-f", f[1]).Run()
					}
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
			defer cancel()
			warm, err := s.createSandbox(ctx) // warm the image and the paths
			if err != nil {
				b.Fatal(err)
			}
			if _, err := shExec(ctx, warm, "a warm-up", "true"); err != nil {
				b.Fatal(err)
			}
			if err := s.closeAll(ctx, []*client.Sandbox{warm}); err != nil {
				b.Fatal(err)
			}

			var reps []forkRep
			for rep := range 3 {
				var r forkRep
				arms := []func() error{
					func() error { return s.forkArm(ctx, n, setup, &r) },
					func() error { return s.freshArm(ctx, n, setup, &r) },
				}
				if rep%2 == 1 {
					slices.Reverse(arms)
				}
				for _, arm := range arms {
					if err := arm(); err != nil {
						b.Fatalf("repetition %d: %v", rep+1, err)
					}
				}
				reps = append(reps, r)
			}
			if left := s.containersLeft(ctx); len(left) > 0 {
				b.Fatalf("the engine still holds containers of the cluster: %v", left)
			}
			if left := s.snapshotImagesLeft(); len(left) > 0 {
				b.Fatalf("the engine still holds snapshot images of the cluster: %v", left)
			}

			col := func(f func(r forkRep) float64) []float64 {
				var v []float64
				for _, r := range reps {
					v = append(v, f(r))
				}
				return v
			}
			med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
			a := col(func(r forkRep) float64 { return (r.snap + r.forks).Seconds() })
			fresh := col(func(r forkRep) float64 { return r.fresh.Seconds() })
			ratio := col(func(r forkRep) float64 { return (r.snap + r.forks).Seconds() / r.fresh.Seconds() })
			b.ReportMetric(med(a), "fork-s")
			b.ReportMetric(med(fresh), "fresh-s")
			b.ReportMetric(med(ratio), "ratio")
			setRow(&rows, row{"snapshot s", spread(col(func(r forkRep) float64 { return r.snap.Seconds() })), "arm A: Snapshot of the set-up sandbox; min / median / max of 3"})
			setRow(&rows, row{"forks s", spread(col(func(r forkRep) float64 { return r.forks.Seconds() })), fmt.Sprintf("arm A: %d forks at once, until the last is READY and checked", n)})
			setRow(&rows, row{"A: snapshot + forks s", spread(a), ""})
			setRow(&rows, row{"B: fresh + setup s", spread(fresh), fmt.Sprintf("%d fresh sandboxes at once, each set up and checked", n)})
			setRow(&rows, row{"ratio A / B", spread(ratio), "the figure to quote"})
			setRow(&rows, row{"source: create + setup s", spread(col(func(r forkRep) float64 { return r.alone.Seconds() })), "arm A's set-up sandbox, untimed in A"})
			setRow(&rows, row{"ratio (source + A) / B", spread(col(func(r forkRep) float64 { return (r.alone + r.snap + r.forks).Seconds() / r.fresh.Seconds() })),
				"arm A from nothing"})
			setRow(&rows, row{"setup exec alone s", spread(col(func(r forkRep) float64 { return r.setupA.Seconds() })), "the source's, the only setup running"})
			setRow(&rows, row{"setup exec in B s", spread(col(func(r forkRep) float64 { return r.setupB.Seconds() })), fmt.Sprintf("the median of arm B's %d, run at once", n)})
			sizeMiB = med(col(func(r forkRep) float64 { return float64(r.size) / (1 << 20) }))
		}
	})
	summary(b, fmt.Sprintf("snapshot + %d forks vs %d fresh setups (%d MiB of files, %v sleep; snapshot image %.1f MiB); A first in repetitions 1 and 3",
		n, n, setup.files, setup.sleep, sizeMiB), &rows)
}
