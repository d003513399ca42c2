// Command megaflow-sh is a static POSIX shell (mvdan.cc/sh/v3's
// interpreter) and the core tools MegaFlow's images built FROM scratch
// need (internal/shellbox): the demo images link sh, ls, find, grep, head,
// wc, cat, sleep and the rest to it, as busybox images link their applets.
//
//	megaflow-sh --list          the programs it serves, one a line
//	megaflow-sh -c 'SCRIPT'     the shell (as does a link named sh)
//	megaflow-sh TOOL ARGS...    one tool (as does a link named TOOL)
//	megaflow-sh --version       its version
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/megaflow/megaflow/internal/shellbox"
	"github.com/megaflow/megaflow/internal/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" && filepath.Base(os.Args[0]) == shellbox.Program {
		fmt.Println(shellbox.Program, version.Get())
		return
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	dir, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "megaflow-sh: working directory:", err)
		os.Exit(1)
	}
	os.Exit(shellbox.Main(context.Background(), os.Args, dir, shellbox.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, sig))
}
