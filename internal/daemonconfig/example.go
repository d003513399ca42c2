package daemonconfig

import (
	"fmt"
	"os"
	"slices"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// CheckExample reports whether the example file at path sets every flag of
// fs that a file may set (all but hidden ones and config, help, version)
// and nothing else, and that fs accepts it: the daemons' tests keep
// deploy/config's examples in step with their flags with it. Errors name
// the flags missing from the file and the keys that are not flags.
func CheckExample(fs *pflag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var keys map[string]yaml.Node
	if err := yaml.Unmarshal(data, &keys); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var missing []string
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := keys[f.Name]; !ok && !f.Hidden && !slices.Contains(reserved, f.Name) {
			missing = append(missing, f.Name)
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("%s does not show the settings %v: add each with its default and a comment where it helps", path, missing)
	}
	return Apply(fs, path)
}
