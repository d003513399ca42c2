package shellbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// env is what a tool runs with: the working directory its relative paths
// resolve against (the shell's, which may differ from the process's), and
// its streams.
type env struct {
	ctx            context.Context
	dir            string
	stdin          io.Reader
	stdout, stderr io.Writer
}

// tool runs with its arguments (its name excluded) and returns its exit
// status.
type tool func(e *env, args []string) int

// tools are the programs besides sh; each takes the options its usage
// line in fail names.
var tools = map[string]tool{
	"cat":   cat,
	"echo":  echo,
	"false": func(*env, []string) int { return 1 },
	"find":  find,
	"grep":  grep,
	"head":  func(e *env, a []string) int { return headTail(e, "head", a) },
	"ls":    ls,
	"mkdir": mkdir,
	"rm":    rm,
	"sleep": sleep,
	"tail":  func(e *env, a []string) int { return headTail(e, "tail", a) },
	"touch": touch,
	"true":  func(*env, []string) int { return 0 },
	"wc":    wc,
}

func abs(dir, p string) string {
	if filepath.IsAbs(p) || dir == "" {
		return p
	}
	return filepath.Join(dir, p)
}

func (e *env) abs(p string) string { return abs(e.dir, p) }

// fail prints "name: message" and returns status 2 (a usage error) or 1.
func (e *env) fail(code int, name, format string, args ...any) int {
	fmt.Fprintf(e.stderr, name+": "+format+"\n", args...)
	return code
}

// open opens a file operand; "-" is stdin.
func (e *env) open(p string) (io.ReadCloser, error) {
	if p == "-" {
		if e.stdin == nil {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return io.NopCloser(e.stdin), nil
	}
	return os.Open(e.abs(p))
}

// flags are parsed short options: set[c] for a flag, val[c] for one that
// takes a value.
type flags struct {
	set map[byte]bool
	val map[byte]string
}

// getopt parses short options (combined, as in -la; a value joined or in
// the next argument) anywhere before "--", as GNU tools do (grep -l x -r
// dir), and returns the operands in order. bools are the flags without a
// value, valued those with one.
func getopt(name string, args []string, bools, valued string) (flags, []string, error) {
	f := flags{set: map[byte]bool{}, val: map[byte]string{}}
	var operands []string
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			return f, append(operands, args[1:]...), nil
		}
		args = args[1:]
		if len(a) < 2 || a[0] != '-' {
			operands = append(operands, a)
			continue
		}
		for i := 1; i < len(a); i++ {
			c := a[i]
			switch {
			case strings.IndexByte(bools, c) >= 0:
				f.set[c] = true
			case strings.IndexByte(valued, c) >= 0:
				v := a[i+1:]
				if v == "" {
					if len(args) == 0 {
						return f, nil, fmt.Errorf("option -%c needs a value", c)
					}
					v, args = args[0], args[1:]
				}
				f.set[c], f.val[c] = true, v
				i = len(a)
			default:
				return f, nil, fmt.Errorf("unknown option -%c (this %s knows %s)", c, name, optList(bools, valued))
			}
		}
	}
	return f, operands, nil
}

func optList(bools, valued string) string {
	var s []string
	for _, c := range bools + valued {
		s = append(s, "-"+string(c))
	}
	return strings.Join(s, " ")
}

func cat(e *env, args []string) int {
	f, files, err := getopt("cat", args, "nu", "")
	if err != nil {
		return e.fail(2, "cat", "%v", err)
	}
	if len(files) == 0 {
		files = []string{"-"}
	}
	code, line := 0, 0
	for _, p := range files {
		r, err := e.open(p)
		if err != nil {
			code = e.fail(1, "cat", "%v", err)
			continue
		}
		if f.set['n'] {
			sc := bufio.NewScanner(r)
			sc.Buffer(nil, 1<<24)
			for sc.Scan() {
				line++
				fmt.Fprintf(e.stdout, "%6d\t%s\n", line, sc.Text())
			}
			err = sc.Err()
		} else {
			_, err = io.Copy(e.stdout, r)
		}
		r.Close()
		if err != nil {
			code = e.fail(1, "cat", "%s: %v", p, err)
		}
	}
	return code
}

func echo(e *env, args []string) int {
	newline := true
	if len(args) > 0 && args[0] == "-n" {
		newline, args = false, args[1:]
	}
	s := strings.Join(args, " ")
	if newline {
		s += "\n"
	}
	io.WriteString(e.stdout, s)
	return 0
}

// sleep sleeps for the sum of its operands: seconds, or a number with s,
// m, h or d; "infinity" sleeps until stopped.
func sleep(e *env, args []string) int {
	if len(args) == 0 {
		return e.fail(2, "sleep", "missing operand: sleep SECONDS (a number with s, m, h or d, or infinity)")
	}
	var total time.Duration
	for _, a := range args {
		if a == "infinity" || a == "inf" {
			<-e.ctx.Done()
			return 130
		}
		unit := time.Second
		num := a
		if n := len(a); n > 0 {
			switch a[n-1] {
			case 's':
				num = a[:n-1]
			case 'm':
				unit, num = time.Minute, a[:n-1]
			case 'h':
				unit, num = time.Hour, a[:n-1]
			case 'd':
				unit, num = 24*time.Hour, a[:n-1]
			}
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || v < 0 {
			return e.fail(2, "sleep", "invalid time interval %q: want seconds, a number with s, m, h or d, or infinity", a)
		}
		total += time.Duration(v * float64(unit))
	}
	t := time.NewTimer(total)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-e.ctx.Done():
		return 130
	}
}

// headTail is head and tail: -n N (or -N) lines, default 10.
func headTail(e *env, name string, args []string) int {
	n := 10
	if len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && args[0][1] >= '0' && args[0][1] <= '9' {
		v, err := strconv.Atoi(args[0][1:])
		if err != nil {
			return e.fail(2, name, "invalid number of lines %q", args[0][1:])
		}
		n, args = v, args[1:]
	}
	f, files, err := getopt(name, args, "q", "n")
	if err != nil {
		return e.fail(2, name, "%v", err)
	}
	if v, ok := f.val['n']; ok {
		if n, err = strconv.Atoi(strings.TrimPrefix(v, "+")); err != nil || n < 0 {
			return e.fail(2, name, "invalid number of lines %q", v)
		}
	}
	if len(files) == 0 {
		files = []string{"-"}
	}
	code := 0
	for i, p := range files {
		r, err := e.open(p)
		if err != nil {
			code = e.fail(1, name, "%v", err)
			continue
		}
		if len(files) > 1 && !f.set['q'] {
			if i > 0 {
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintf(e.stdout, "==> %s <==\n", p)
		}
		br := bufio.NewReader(r)
		var last []string
		for k := 0; name == "tail" || k < n; k++ {
			line, err := br.ReadString('\n')
			if line != "" {
				if name == "head" {
					io.WriteString(e.stdout, line)
				} else if n > 0 {
					if last = append(last, line); len(last) > n {
						last = last[1:]
					}
				}
			}
			if err != nil {
				break
			}
		}
		for _, l := range last {
			io.WriteString(e.stdout, l)
		}
		r.Close()
	}
	return code
}

// wc counts lines (-l), words (-w) and bytes (-c); all three by default.
func wc(e *env, args []string) int {
	f, files, err := getopt("wc", args, "lwcm", "")
	if err != nil {
		return e.fail(2, "wc", "%v", err)
	}
	cols := []byte{'l', 'w', 'c'}
	if f.set['l'] || f.set['w'] || f.set['c'] || f.set['m'] {
		cols = nil
		for _, c := range []byte("lwcm") {
			if f.set[c] {
				cols = append(cols, c)
			}
		}
	}
	named := len(files) > 0
	if !named {
		files = []string{"-"}
	}
	type count struct {
		n    map[byte]int64
		name string
	}
	var rows []count
	total := count{n: map[byte]int64{}, name: "total"}
	code := 0
	for _, p := range files {
		r, err := e.open(p)
		if err != nil {
			code = e.fail(1, "wc", "%v", err)
			continue
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			code = e.fail(1, "wc", "%s: %v", p, err)
			continue
		}
		c := count{n: map[byte]int64{'l': int64(bytes.Count(b, []byte{'\n'})), 'w': int64(len(bytes.Fields(b))),
			'c': int64(len(b)), 'm': int64(len([]rune(string(b))))}}
		if named {
			c.name = p
		}
		for k, v := range c.n {
			total.n[k] += v
		}
		rows = append(rows, c)
	}
	if len(rows) > 1 {
		rows = append(rows, total)
	}
	width := 1
	if len(cols) > 1 || len(rows) > 1 {
		width = len(strconv.FormatInt(max(total.n['c'], total.n['l'], total.n['w']), 10))
		width = max(width, 7)
	}
	for _, r := range rows {
		var s []string
		for _, c := range cols {
			s = append(s, fmt.Sprintf("%*d", width, r.n[c]))
		}
		if r.name != "" {
			s = append(s, r.name)
		}
		fmt.Fprintln(e.stdout, strings.Join(s, " "))
	}
	return code
}

func mkdir(e *env, args []string) int {
	f, dirs, err := getopt("mkdir", args, "p", "m")
	if err != nil {
		return e.fail(2, "mkdir", "%v", err)
	}
	if len(dirs) == 0 {
		return e.fail(2, "mkdir", "missing operand: mkdir [-p] DIR...")
	}
	code := 0
	for _, d := range dirs {
		if f.set['p'] {
			err = os.MkdirAll(e.abs(d), 0o755)
		} else {
			err = os.Mkdir(e.abs(d), 0o755)
		}
		if err != nil {
			code = e.fail(1, "mkdir", "%v", err)
		}
	}
	return code
}

func rm(e *env, args []string) int {
	f, paths, err := getopt("rm", args, "rRf", "")
	if err != nil {
		return e.fail(2, "rm", "%v", err)
	}
	if len(paths) == 0 && !f.set['f'] {
		return e.fail(2, "rm", "missing operand: rm [-rf] PATH...")
	}
	code := 0
	for _, p := range paths {
		a := e.abs(p)
		fi, err := os.Lstat(a)
		switch {
		case err != nil && f.set['f'] && os.IsNotExist(err):
			continue
		case err != nil:
			code = e.fail(1, "rm", "%v", err)
			continue
		case fi.IsDir() && !f.set['r'] && !f.set['R']:
			code = e.fail(1, "rm", "%s: is a directory (use -r)", p)
			continue
		}
		if err := os.RemoveAll(a); err != nil {
			code = e.fail(1, "rm", "%v", err)
		}
	}
	return code
}

func touch(e *env, args []string) int {
	_, paths, err := getopt("touch", args, "c", "")
	if err != nil {
		return e.fail(2, "touch", "%v", err)
	}
	code := 0
	now := time.Now()
	for _, p := range paths {
		a := e.abs(p)
		if err := os.Chtimes(a, now, now); err == nil {
			continue
		} else if !os.IsNotExist(err) {
			code = e.fail(1, "touch", "%v", err)
			continue
		}
		f, err := os.OpenFile(a, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			code = e.fail(1, "touch", "%v", err)
			continue
		}
		f.Close()
	}
	return code
}

// walk calls fn for root and, when it is a directory, everything under
// it, lexically, with the path as the caller spelt it.
func (e *env) walk(root string, fn func(p string, d fs.DirEntry, depth int) error) error {
	a := e.abs(root)
	return filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctxErr := e.ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		rel, _ := filepath.Rel(a, p)
		shown, depth := root, 0
		if rel != "." {
			shown = strings.TrimSuffix(root, "/") + "/" + filepath.ToSlash(rel)
			depth = strings.Count(rel, string(filepath.Separator)) + 1
		}
		return fn(shown, d, depth)
	})
}
