package shellbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Program is the name of the multi-call binary; symlinks named sh or after
// a tool run that part of it.
const Program = "megaflow-sh"

// IO is a program's standard streams.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Tools returns the names of the programs Main serves besides sh, sorted:
// the names the image build links to the binary.
func Tools() []string {
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Main runs the program that args[0] names (its base name): "sh" runs the
// shell, a name of Tools runs that tool, and Program itself takes the
// program as its first argument (megaflow-sh ls -la), or --list to print
// sh and the tools, one a line. It returns the exit status. sig delivers
// the signals the process receives (nil: none); Main reads it only while
// it runs. dir is the working directory relative paths resolve against.
func Main(ctx context.Context, args []string, dir string, stdio IO, sig <-chan os.Signal) int {
	name := "sh"
	if len(args) > 0 {
		name = filepath.Base(args[0])
		args = args[1:]
	}
	if name == Program {
		if len(args) == 0 || args[0] == "--help" || args[0] == "-h" {
			fmt.Fprintf(stdio.Stdout, "usage: %s PROGRAM [ARGS...] | --list\n"+
				"a static shell (sh, from mvdan.cc/sh/v3) and core tools for images built FROM scratch\n"+
				"programs: sh %s\n", Program, strings.Join(Tools(), " "))
			return 0
		}
		if args[0] == "--list" {
			fmt.Fprintln(stdio.Stdout, "sh")
			for _, t := range Tools() {
				fmt.Fprintln(stdio.Stdout, t)
			}
			return 0
		}
		if strings.HasPrefix(args[0], "-") {
			// megaflow-sh -c '...': the shell.
			return Main(ctx, append([]string{"sh"}, args...), dir, stdio, sig)
		}
		return Main(ctx, args, dir, stdio, sig)
	}
	if name == "sh" {
		return runShell(ctx, args, dir, stdio, sig)
	}
	tool, ok := tools[name]
	if !ok {
		fmt.Fprintf(stdio.Stderr, "%s: no program %q here: it serves sh %s\n", Program, name, strings.Join(Tools(), " "))
		return 127
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	caught := make(chan int, 1)
	go func() { // owned: ends with Main through cancel
		select {
		case s := <-sig:
			caught <- signalNumber(s)
			cancel()
		case <-ctx.Done():
		}
	}()
	code := tool(&env{ctx: ctx, dir: dir, stdin: stdio.Stdin, stdout: stdio.Stdout, stderr: stdio.Stderr}, args)
	cancel()
	select {
	case n := <-caught:
		return 128 + n
	default:
		return code
	}
}
