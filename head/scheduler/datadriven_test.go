package scheduler

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/scenario"
)

// rewrite regenerates the expected output of scenario files:
//
//	go test ./head/scheduler -rewrite
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/*.txt")

// A scenario file is a list of blocks (internal/scenario):
//
//	# comments and blank lines between blocks are kept
//	command arg key=value ...
//	----
//	expected output, up to a blank line or the end of the file
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := newSim()
			scenario.Run(t, f, *rewrite, s.do)
		})
	}
}

// args splits "cmd a b k=v" into its positional arguments and key=value
// pairs (scenario.Args).
func args(fields []string) (pos []string, kv map[string]string) { return scenario.Args(fields) }

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
