package shellbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ls [-laAd1F] [PATH...]: one name a line; -l the long form (mode, links,
// owner, group, size, time, name).
func ls(e *env, args []string) int {
	f, paths, err := getopt("ls", args, "laAd1Fh", "")
	if err != nil {
		return e.fail(2, "ls", "%v", err)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	code := 0
	var dirs []string
	var files []entry
	for _, p := range paths {
		fi, err := os.Lstat(e.abs(p))
		if err != nil {
			code = e.fail(2, "ls", "%v", err)
			continue
		}
		if fi.Mode()&fs.ModeSymlink != 0 && !f.set['l'] && !f.set['d'] {
			if t, err := os.Stat(e.abs(p)); err == nil {
				fi = t
			}
		}
		if fi.IsDir() && !f.set['d'] {
			dirs = append(dirs, p)
		} else {
			files = append(files, entry{name: p, info: fi, path: e.abs(p)})
		}
	}
	e.printEntries(f, files)
	for i, d := range dirs {
		if len(paths) > 1 {
			if i > 0 || len(files) > 0 {
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintf(e.stdout, "%s:\n", d)
		}
		list, err := e.readDir(d, f.set['a'], f.set['A'])
		if err != nil {
			code = e.fail(2, "ls", "%v", err)
			continue
		}
		if f.set['l'] {
			var blocks int64
			for _, x := range list {
				blocks += blocksOf(x.info)
			}
			fmt.Fprintf(e.stdout, "total %d\n", blocks)
		}
		e.printEntries(f, list)
	}
	return code
}

// entry is one name ls prints.
type entry struct {
	name, path string
	info       fs.FileInfo
}

func (e *env) readDir(d string, all, almostAll bool) ([]entry, error) {
	a := e.abs(d)
	des, err := os.ReadDir(a)
	if err != nil {
		return nil, err
	}
	var list []entry
	if all {
		for _, n := range []string{".", ".."} {
			if fi, err := os.Stat(filepath.Join(a, n)); err == nil {
				list = append(list, entry{name: n, info: fi, path: filepath.Join(a, n)})
			}
		}
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") && !all && !almostAll {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		list = append(list, entry{name: de.Name(), info: fi, path: filepath.Join(a, de.Name())})
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].name < list[j].name })
	return list, nil
}

func (e *env) printEntries(f flags, list []entry) {
	for _, x := range list {
		name := x.name
		if f.set['F'] {
			switch m := x.info.Mode(); {
			case m.IsDir():
				name += "/"
			case m&fs.ModeSymlink != 0:
				name += "@"
			case m&0o111 != 0:
				name += "*"
			}
		}
		if !f.set['l'] {
			fmt.Fprintln(e.stdout, name)
			continue
		}
		if x.info.Mode()&fs.ModeSymlink != 0 {
			if t, err := os.Readlink(x.path); err == nil {
				name += " -> " + t
			}
		}
		links, uid, gid := ownerOf(x.info)
		t := x.info.ModTime()
		stamp := t.Format("Jan _2 15:04")
		if age := time.Since(t); age > 180*24*time.Hour || age < -time.Hour {
			stamp = t.Format("Jan _2  2006")
		}
		fmt.Fprintf(e.stdout, "%s %3d %-8s %-8s %8d %s %s\n", modeString(x.info.Mode()), links, uid, gid, x.info.Size(), stamp, name)
	}
}

// modeString is ls -l's mode column: type then rwx triplets, with s, S, t
// and T for setuid, setgid and sticky.
func modeString(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(i int, set bool, exec, noexec byte) {
		if !set {
			return
		}
		if b[i] == '-' {
			b[i] = noexec
		} else {
			b[i] = exec
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}
