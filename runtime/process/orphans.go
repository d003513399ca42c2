package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/megaflow/megaflow/internal/leaseinit"
)

// Records of started process groups (Config.StateDir): one file per
// process, "<pgid> <start time>", written after the fork and removed once
// the group is reaped. A Runtime opened on the directory of a worker that
// crashed finds the records left, and kills the groups still running: the
// new worker cannot adopt them, and the head re-runs their tasks, so
// leaving them would run a task twice (two ranks of one gang, two holders
// of one GPU). The start time (field 22 of /proc/<pid>/stat, in clock
// ticks since boot) tells the group's leader from a later process that
// got its pid; a group whose leader already exited keeps its id reserved
// while any member lives (Linux frees a pid only when no process uses it
// as a pid, process group or session id), so its members are ours.

const recordExt = ".pg"

// writeRecord records p's process group in dir, in one write to a new
// file, without a temporary file and a rename (two more file system
// changes on every start, for nothing): the records
// matter only when the worker crashed and the machine did not, and a
// crashed process cannot leave a write of a few bytes to the page cache
// half done. A crash between the file's creation and the write leaves an
// empty record, which killOrphans drops, as it would have no record.
func writeRecord(dir string, p *proc) error {
	st, err := leaseinit.StartTime(p.pid)
	if err != nil {
		return err
	}
	return writeRecordAt(dir, p, st)
}

// writeRecordAt is writeRecord with the group leader's start time known
// (the spawner read it before it could reap the leader).
func writeRecordAt(dir string, p *proc, st uint64) error {
	return os.WriteFile(filepath.Join(dir, p.id+recordExt), []byte(fmt.Sprintf("%d %d\n", p.pid, st)), 0o600)
}

// removeRecord forgets the record of process id in dir, if any.
func removeRecord(dir, id string) {
	_ = os.Remove(filepath.Join(dir, id+recordExt))
}

// killOrphans kills (SIGKILL) the process groups recorded in dir that
// still run, removes every record, and returns how many groups it killed.
func killOrphans(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, de := range ents {
		name := de.Name()
		path := filepath.Join(dir, name)
		if strings.HasSuffix(name, ".tmp") { // an earlier version's temporary record
			_ = os.Remove(path)
			continue
		}
		if !strings.HasSuffix(name, recordExt) {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var pgid int
		var st uint64
		if _, err := fmt.Sscan(string(b), &pgid, &st); err == nil && pgid > 1 && groupIsOurs(pgid, st) {
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
				killed++
			} else if !errors.Is(err, syscall.ESRCH) {
				return killed, fmt.Errorf("kill process group %d: %w", pgid, err)
			}
		}
		_ = os.Remove(path)
	}
	return killed, nil
}

// groupIsOurs reports whether process group pgid is still the one whose
// leader started at start: the leader lives with that start time, or the
// leader is gone and some process is still in the group.
func groupIsOurs(pgid int, start uint64) bool {
	if st, err := leaseinit.StartTime(pgid); err == nil {
		return st == start
	}
	procs, _ := os.ReadDir("/proc")
	for _, de := range procs {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		if f, err := leaseinit.StatFields(pid); err == nil && len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}
