package main

import (
	"path/filepath"
	"testing"

	"github.com/megaflow/megaflow/internal/daemonconfig"
)

// The example in deploy/config shows every setting, and the head takes
// them.
func TestConfigExample(t *testing.T) {
	if err := daemonconfig.CheckExample(newCommand().Flags(), filepath.Join("..", "..", "deploy", "config", "head.yaml")); err != nil {
		t.Fatal(err)
	}
}
