// Package daemonconfig reads a daemon's configuration file into its
// command-line flags, so that megaflow-head and megaflow-worker take the same
// settings from a file (--config FILE, as systemd units and Compose files
// pass them) as from their flags, with one set of names, defaults, checks
// and help texts: the flags'.
//
// The file is a YAML mapping whose keys are the long flag names without
// their dashes:
//
//	node-id: h1
//	data-dir: /var/lib/megaflow/h1
//	join: [10.0.0.2:7946, 10.0.0.3:7946]   # or "10.0.0.2:7946,10.0.0.3:7946"
//	worker-lease: 10s
//	labels: {zone: a, disk: ssd}           # or "zone=a,disk=ssd"
//
// A flag given on the command line wins over the file. A sequence becomes
// the flag's comma-separated list, a mapping its comma-separated k=v list
// (keys sorted). An unknown key, a key given twice, or a value the flag
// refuses is an error naming the file, the line and the key, and nothing
// is set.
package daemonconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds a configuration file: 1 MiB, far above any real one.
const MaxFileBytes = 1 << 20

// reserved are flags a file may not set: they choose the file, or print
// and exit.
var reserved = []string{"config", "help", "version"}

// Apply reads the YAML file at path and sets every flag of fs named by one
// of its keys, unless the flag was already set on the command line
// (pflag.Flag.Changed). Call it after the command line is parsed and
// before the flags' values are used (a cobra PreRunE). Errors: the file
// cannot be read or is over MaxFileBytes, is not a YAML mapping of
// scalars, sequences of scalars or mappings of scalars, names a key that
// is not a flag of fs (or is config, help or version), names one twice, or
// holds a value its flag refuses. On an error no flag is changed.
func Apply(fs *pflag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if len(data) > MaxFileBytes {
		return fmt.Errorf("config file %s: %d bytes, more than %d", path, len(data), MaxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: line %d: want a mapping of flag names to values (e.g. \"data-dir: /var/lib/megaflow\")", path, root.Line)
	}
	type setting struct {
		flag  *pflag.Flag
		value string
		line  int
	}
	var settings []setting
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		at := func(format string, args ...any) error {
			return fmt.Errorf("config file %s: line %d: key %q: %s", path, k.Line, name, fmt.Sprintf(format, args...))
		}
		if line, dup := seen[name]; dup {
			return at("given twice (first on line %d)", line)
		}
		seen[name] = k.Line
		f := fs.Lookup(name)
		if f == nil || slices.Contains(reserved, name) {
			return at("not a setting of this daemon; the keys are its long flag names without the dashes (see --help)")
		}
		value, err := flatten(v)
		if err != nil {
			return at("%v", err)
		}
		if !f.Changed {
			settings = append(settings, setting{f, value, k.Line})
		}
	}
	// On a refused value, the flags set before it get their old values
	// back: an error changes nothing.
	type previous struct {
		flag    *pflag.Flag
		value   string
		changed bool
	}
	var done []previous
	for _, s := range settings {
		old := previous{s.flag, s.flag.Value.String(), s.flag.Changed}
		if err := fs.Set(s.flag.Name, s.value); err != nil {
			// Some pflag values change even when they refuse (a duration
			// becomes 0): this one is restored too.
			done = append(done, old)
			for _, p := range slices.Backward(done) {
				_ = p.flag.Value.Set(p.value)
				p.flag.Changed = p.changed
			}
			return fmt.Errorf("config file %s: line %d: key %q: %v", path, s.line, s.flag.Name, err)
		}
		done = append(done, old)
	}
	return nil
}

// flatten renders a YAML value as a flag's text: a scalar as written, a
// sequence of scalars comma-joined, a mapping of scalars as sorted k=v
// pairs comma-joined.
func flatten(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("line %d: a list may hold plain values only", c.Line)
			}
			parts = append(parts, c.Value)
		}
		return strings.Join(parts, ","), nil
	case yaml.MappingNode:
		parts := make([]string, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("line %d: a mapping may hold plain keys and values only", k.Line)
			}
			parts = append(parts, k.Value+"="+v.Value)
		}
		slices.Sort(parts)
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("line %d: want a value, a list or a mapping", n.Line)
}

// Register adds the --config flag to a daemon's command and reads the file
// it names into the command's flags before the command runs (and before
// cobra checks its required flags, so a required flag may come from the
// file). It replaces cmd.PreRunE, which must be nil.
func Register(cmd *cobra.Command) {
	var path string
	cmd.Flags().StringVar(&path, "config", "", "YAML file of settings: each key a long flag name without its dashes (e.g. data-dir: /var/lib/megaflow); flags given on the command line win")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if path == "" {
			return nil
		}
		return Apply(cmd.Flags(), path)
	}
}
