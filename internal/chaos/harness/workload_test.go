package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTaskCommandRecordsItsExecution runs a task's script in a real shell:
// run to its end it writes start and end; stopped by SIGTERM to its
// process group (as megaflow-init and the process runtime stop a task) it
// writes start and stop, so that the verdict knows when it stopped.
func TestTaskCommandRecordsItsExecution(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sleep float64
		term  bool
		want  []string
	}{
		{"runs to its end", 0.1, false, []string{"start", "end"}},
		{"stopped by SIGTERM", 30, true, []string{"start", "stop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "w1", "exec"), 0o755); err != nil {
				t.Fatal(err)
			}
			w := &workload{execDir: dir}
			argv := w.taskCommand("g1", "t0", tc.sleep, 0)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "MEGAFLOW_WORKER_ID=w1", "MEGAFLOW_ATTEMPT=2")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "w1", "exec", "g1__t0")
			if tc.term {
				deadline := time.Now().Add(10 * time.Second)
				for {
					if b, _ := os.ReadFile(file); strings.HasPrefix(string(b), "start ") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("no start line within 10 s")
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				t.Fatal("the task did not end within 10 s")
			}
			got, err := readExecutions(dir)
			if err != nil {
				t.Fatal(err)
			}
			ex := got["g1/t0"]
			if len(ex) != len(tc.want) {
				t.Fatalf("execution lines %+v, want kinds %v", ex, tc.want)
			}
			for i, k := range tc.want {
				e := ex[i]
				if e.Attempt != 2 || e.Worker != "w1" || e.End != (k != "start") || e.Stopped != (k == "stop") || e.At <= 0 {
					t.Fatalf("line %d %+v, want a %s line of attempt 2 on w1", i, e, k)
				}
			}
			if ex[1].At < ex[0].At {
				t.Fatalf("the end %d precedes the start %d", ex[1].At, ex[0].At)
			}
		})
	}
}
