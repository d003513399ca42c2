package shellbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// find PATH... [-type f|d|l] [-name PAT] [-iname PAT] [-path PAT]
// [-maxdepth N] [-mindepth N] [-print]: every test must hold (AND);
// lexical order.
func find(e *env, args []string) int {
	var roots []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		roots, args = append(roots, args[0]), args[1:]
	}
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var tests []func(p string, d fs.DirEntry) bool
	maxDepth, minDepth := -1, 0
	for len(args) > 0 {
		op := args[0]
		args = args[1:]
		if op == "-print" {
			continue
		}
		if len(args) == 0 {
			return e.fail(2, "find", "%s needs a value (this find knows -type -name -iname -path -maxdepth -mindepth -print)", op)
		}
		v := args[0]
		args = args[1:]
		switch op {
		case "-type":
			if v != "f" && v != "d" && v != "l" {
				return e.fail(2, "find", "-type %s: want f, d or l", v)
			}
			tests = append(tests, func(_ string, d fs.DirEntry) bool {
				t := d.Type()
				return v == "f" && t.IsRegular() || v == "d" && t.IsDir() || v == "l" && t&fs.ModeSymlink != 0
			})
		case "-name", "-iname":
			pat, fold := v, op == "-iname"
			if fold {
				pat = strings.ToLower(pat)
			}
			if _, err := filepath.Match(pat, ""); err != nil {
				return e.fail(2, "find", "%s %q: %v", op, v, err)
			}
			tests = append(tests, func(p string, _ fs.DirEntry) bool {
				base := filepath.Base(p)
				if fold {
					base = strings.ToLower(base)
				}
				ok, _ := filepath.Match(pat, base)
				return ok
			})
		case "-path":
			if _, err := filepath.Match(v, ""); err != nil {
				return e.fail(2, "find", "-path %q: %v", v, err)
			}
			tests = append(tests, func(p string, _ fs.DirEntry) bool { return matchPath(v, p) })
		case "-maxdepth", "-mindepth":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return e.fail(2, "find", "%s %q: want a number", op, v)
			}
			if op == "-maxdepth" {
				maxDepth = n
			} else {
				minDepth = n
			}
		default:
			return e.fail(2, "find", "unknown primary %s (this find knows -type -name -iname -path -maxdepth -mindepth -print)", op)
		}
	}
	code := 0
	for _, root := range roots {
		err := e.walk(root, func(p string, d fs.DirEntry, depth int) error {
			if depth >= minDepth && (maxDepth < 0 || depth <= maxDepth) {
				ok := true
				for _, t := range tests {
					if ok = t(p, d); !ok {
						break
					}
				}
				if ok {
					fmt.Fprintln(e.stdout, p)
				}
			}
			if d.IsDir() && maxDepth >= 0 && depth >= maxDepth {
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			code = e.fail(1, "find", "%v", err)
		}
	}
	return code
}

// matchPath matches a -path pattern, where * also crosses slashes.
func matchPath(pat, p string) bool {
	re := regexp.QuoteMeta(pat)
	re = strings.NewReplacer(`\*`, `.*`, `\?`, `.`).Replace(re)
	ok, _ := regexp.MatchString("^"+re+"$", p)
	return ok
}

// grep [-rRnivclLhHqsEFwx] [-e PAT] PAT [FILE...]: PAT is a basic regular
// expression (-E extended, -F a fixed string); -r without FILE searches
// the working directory. Status 0 when a line matched, 1 when none, 2 on
// an error.
func grep(e *env, args []string) int {
	f, rest, err := getopt("grep", args, "rRnivclLhHqsEFwxI", "e")
	if err != nil {
		return e.fail(2, "grep", "%v", err)
	}
	pat, ok := f.val['e']
	if !ok {
		if len(rest) == 0 {
			return e.fail(2, "grep", "missing pattern: grep [OPTION]... PATTERN [FILE]...")
		}
		pat, rest = rest[0], rest[1:]
	}
	expr := pat
	switch {
	case f.set['F']:
		expr = regexp.QuoteMeta(pat)
	case !f.set['E']:
		expr = basicToGo(pat)
	}
	if f.set['w'] {
		expr = `\b(?:` + expr + `)\b`
	}
	if f.set['x'] {
		expr = `^(?:` + expr + `)$`
	}
	if f.set['i'] {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return e.fail(2, "grep", "pattern %q: %v", pat, err)
	}
	recursive := f.set['r'] || f.set['R']
	files := rest
	if len(files) == 0 {
		if recursive {
			files = []string{"."}
		} else {
			files = []string{"-"}
		}
	}
	showName := (len(files) > 1 || recursive) && !f.set['h'] || f.set['H']
	matched, failed := false, false
	search := func(name string, r io.Reader) {
		br := bufio.NewReader(r)
		count, line := 0, 0
		for {
			text, err := br.ReadString('\n')
			if text == "" && err != nil {
				break
			}
			line++
			body := strings.TrimSuffix(text, "\n")
			if re.MatchString(body) == f.set['v'] {
				if err != nil {
					break
				}
				continue
			}
			matched = true
			count++
			if f.set['q'] {
				return
			}
			if f.set['l'] || f.set['L'] || f.set['c'] {
				if f.set['l'] {
					break
				}
				continue
			}
			var prefix []string
			if showName {
				prefix = append(prefix, name)
			}
			if f.set['n'] {
				prefix = append(prefix, strconv.Itoa(line))
			}
			if len(prefix) > 0 {
				fmt.Fprintf(e.stdout, "%s:%s\n", strings.Join(prefix, ":"), body)
			} else {
				fmt.Fprintln(e.stdout, body)
			}
			if err != nil {
				break
			}
		}
		switch {
		case f.set['c'] && showName:
			fmt.Fprintf(e.stdout, "%s:%d\n", name, count)
		case f.set['c']:
			fmt.Fprintln(e.stdout, count)
		case f.set['l'] && count > 0, f.set['L'] && count == 0:
			fmt.Fprintln(e.stdout, name)
		}
	}
	for _, file := range files {
		if f.set['q'] && matched {
			break
		}
		if file == "-" {
			r, _ := e.open("-")
			search("(standard input)", r)
			continue
		}
		fi, err := os.Stat(e.abs(file))
		if err != nil {
			failed = true
			if !f.set['s'] {
				e.fail(2, "grep", "%v", err)
			}
			continue
		}
		if !fi.IsDir() {
			failed = grepFile(e, file, search, f.set['s']) || failed
			continue
		}
		if !recursive {
			failed = true
			e.fail(2, "grep", "%s: is a directory", file)
			continue
		}
		err = e.walk(file, func(p string, d fs.DirEntry, _ int) error {
			if d.Type().IsRegular() {
				if file == "." && !strings.HasPrefix(files[0], "./") && len(rest) == 0 {
					p = strings.TrimPrefix(p, "./")
				}
				failed = grepFile(e, p, search, f.set['s']) || failed
			}
			return nil
		})
		if err != nil {
			failed = true
			e.fail(2, "grep", "%v", err)
		}
	}
	switch {
	case failed && !(f.set['q'] && matched):
		return 2
	case matched:
		return 0
	}
	return 1
}

// grepFile searches one file, skipping binary ones (a NUL in the first
// 8 KiB); it reports whether the file could not be read.
func grepFile(e *env, name string, search func(string, io.Reader), quiet bool) bool {
	fh, err := os.Open(e.abs(name))
	if err != nil {
		if !quiet {
			e.fail(2, "grep", "%v", err)
		}
		return true
	}
	defer fh.Close()
	br := bufio.NewReader(fh)
	head, _ := br.Peek(8 << 10)
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	search(name, br)
	return false
}

// basicToGo turns a POSIX basic regular expression into Go's syntax: \( \)
// \{ \} \| \+ \? are the operators, and ( ) { } | + ? are literal.
func basicToGo(b string) string {
	var s strings.Builder
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '\\' && i+1 < len(b):
			n := b[i+1]
			i++
			if strings.IndexByte("(){}|+?", n) >= 0 {
				s.WriteByte(n)
			} else {
				s.WriteByte('\\')
				s.WriteByte(n)
			}
		case strings.IndexByte("(){}|+?", c) >= 0:
			s.WriteByte('\\')
			s.WriteByte(c)
		default:
			s.WriteByte(c)
		}
	}
	return s.String()
}
