package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
)

// ParseGraphYAML reads a graph file: YAML whose keys are the GraphSpec
// fields of the wire API (proto names, e.g. depends_on, timeout_seconds),
// one to one. Enum values may be written short and in lower case
// (mode: persistent, kind: service). The graph is then validated. Errors
// are errs.InvalidArgument and name the file, the line and the field:
//
//	graph.yaml:12: tasks[1].resources.cpu_milis: unknown field (known: cpu_millis, memory_bytes, gpus, gpu_model, gpu_memory_bytes)
//
// name is used in messages only (a path, or "-" for standard input).
func ParseGraphYAML(name string, data []byte) (*GraphSpec, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, errs.New(errs.InvalidArgument, "%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, errs.New(errs.InvalidArgument, "%s: empty file; a graph file needs at least `tasks:`", name)
	}
	g := &GraphSpec{}
	if err := decodeMessage(name, "", doc.Content[0], g.ProtoReflect()); err != nil {
		return nil, err
	}
	if err := spec.Validate(spec.Normalize(g), spec.DefaultLimits()); err != nil {
		var fe *spec.FieldError
		if errors.As(err, &fe) {
			if n := locate(doc.Content[0], fe.Task, fe.Field); n != nil {
				return nil, errs.New(errs.InvalidArgument, "%s:%d: %v", name, n.Line, err)
			}
		}
		return nil, errs.New(errs.InvalidArgument, "%s: %v", name, err)
	}
	return g, nil
}

// locate returns the node of a graph file that a validation problem is
// about: the key of field (a dotted path, as far as the file spells it
// out) of task number task (-1: of the graph), else the task's own node;
// nil when the file does not hold it.
func locate(root *yaml.Node, task int, field string) *yaml.Node {
	n, at := root, (*yaml.Node)(nil)
	if task >= 0 {
		_, tasks := child(root, "tasks")
		if tasks == nil || tasks.Kind != yaml.SequenceNode || task >= len(tasks.Content) {
			return nil
		}
		n = tasks.Content[task]
		at = n
	}
	for _, f := range strings.Split(field, ".") {
		k, v := child(n, f)
		if k == nil {
			break
		}
		n, at = v, k
	}
	return at
}

// child returns the key and value nodes of key in mapping node n, or nils.
func child(n *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode || key == "" {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

func yamlErr(file string, n *yaml.Node, path, format string, args ...any) error {
	where := file
	if n != nil {
		where = fmt.Sprintf("%s:%d", file, n.Line)
	}
	if path != "" {
		where += ": " + path
	}
	return errs.New(errs.InvalidArgument, "%s: %s", where, fmt.Sprintf(format, args...))
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func decodeMessage(file, path string, n *yaml.Node, m protoreflect.Message) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return yamlErr(file, n, path, "want a mapping of fields, got %s", kindName(n))
	}
	fields := m.Descriptor().Fields()
	// YAML merge keys (<<: *anchor) first, so explicit keys override them.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], resolve(n.Content[i+1]); k.Value == "<<" && k.Tag == "!!merge" {
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, src := range srcs {
				if err := decodeMessage(file, path, src, m); err != nil {
					return err
				}
			}
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.Tag == "!!merge" {
			continue
		}
		fd := fields.ByName(protoreflect.Name(k.Value))
		if fd == nil {
			fd = fields.ByJSONName(k.Value)
		}
		fpath := join(path, k.Value)
		if fd == nil {
			var known []string
			for j := 0; j < fields.Len(); j++ {
				known = append(known, string(fields.Get(j).Name()))
			}
			return yamlErr(file, k, fpath, "unknown field (known: %s)", strings.Join(known, ", "))
		}
		if err := decodeField(file, fpath, v, m, fd); err != nil {
			return err
		}
	}
	return nil
}

func decodeField(file, path string, n *yaml.Node, m protoreflect.Message, fd protoreflect.FieldDescriptor) error {
	n = resolve(n)
	switch {
	case fd.IsMap():
		if n.Kind != yaml.MappingNode {
			return yamlErr(file, n, path, "want a mapping, got %s", kindName(n))
		}
		mp := m.Mutable(fd).Map()
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			val, err := scalar(file, path+"."+k.Value, v, fd.MapValue())
			if err != nil {
				return err
			}
			mp.Set(protoreflect.ValueOfString(k.Value).MapKey(), val)
		}
	case fd.IsList():
		if n.Kind != yaml.SequenceNode {
			return yamlErr(file, n, path, "want a list, got %s", kindName(n))
		}
		m.Clear(fd) // a list given again (over a merge key) replaces it
		list := m.Mutable(fd).List()
		for i, item := range n.Content {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			if fd.Message() != nil {
				elem := list.NewElement()
				if err := decodeMessage(file, ipath, item, elem.Message()); err != nil {
					return err
				}
				list.Append(elem)
				continue
			}
			val, err := scalar(file, ipath, item, fd)
			if err != nil {
				return err
			}
			list.Append(val)
		}
	case fd.Message() != nil:
		return decodeMessage(file, path, n, m.Mutable(fd).Message())
	default:
		val, err := scalar(file, path, n, fd)
		if err != nil {
			return err
		}
		m.Set(fd, val)
	}
	return nil
}

func scalar(file, path string, n *yaml.Node, fd protoreflect.FieldDescriptor) (protoreflect.Value, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return protoreflect.Value{}, yamlErr(file, n, path, "want a single value, got %s", kindName(n))
	}
	s := n.Value
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(s), nil
	case protoreflect.BoolKind:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return protoreflect.Value{}, yamlErr(file, n, path, "%q is not true or false", s)
		}
		return protoreflect.ValueOfBool(b), nil
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		v, err := parseInt(s)
		if err != nil {
			return protoreflect.Value{}, yamlErr(file, n, path, "%q is not a whole number%s", s, unitHint(path))
		}
		if fd.Kind() == protoreflect.Int32Kind {
			if int64(int32(v)) != v {
				return protoreflect.Value{}, yamlErr(file, n, path, "%d is out of range", v)
			}
			return protoreflect.ValueOfInt32(int32(v)), nil
		}
		return protoreflect.ValueOfInt64(v), nil
	case protoreflect.EnumKind:
		ev := enumValue(fd.Enum(), s)
		if ev == nil {
			var names []string
			vals := fd.Enum().Values()
			for i := 1; i < vals.Len(); i++ {
				names = append(names, shortEnum(fd.Enum(), vals.Get(i)))
			}
			return protoreflect.Value{}, yamlErr(file, n, path, "%q is not one of %s", s, strings.Join(names, ", "))
		}
		return protoreflect.ValueOfEnum(ev.Number()), nil
	}
	return protoreflect.Value{}, yamlErr(file, n, path, "fields of kind %v cannot be set from a graph file", fd.Kind())
}

// parseInt accepts plain integers and binary size suffixes (Ki, Mi, Gi, Ti)
// so memory can be written as 512Mi.
func parseInt(s string) (int64, error) {
	s = strings.ReplaceAll(s, "_", "")
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSuffix(s, suffix), m
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if v != 0 && (v*mult)/mult != v {
		return 0, fmt.Errorf("overflow")
	}
	return v * mult, nil
}

func unitHint(path string) string {
	switch {
	case strings.HasSuffix(path, "_bytes"):
		return " of bytes (suffixes Ki, Mi, Gi, Ti allowed)"
	case strings.HasSuffix(path, "_millis"):
		return " of millicores (1000 = one core)"
	case strings.HasSuffix(path, "_seconds"):
		return " of seconds"
	}
	return ""
}

// enumValue finds an enum value by its full name (TASK_KIND_SERVICE) or its
// short lower-case form (service).
func enumValue(ed protoreflect.EnumDescriptor, s string) protoreflect.EnumValueDescriptor {
	if v := ed.Values().ByName(protoreflect.Name(s)); v != nil {
		return v
	}
	vals := ed.Values()
	for i := 0; i < vals.Len(); i++ {
		if shortEnum(ed, vals.Get(i)) == strings.ToLower(s) {
			return vals.Get(i)
		}
	}
	return nil
}

func shortEnum(ed protoreflect.EnumDescriptor, v protoreflect.EnumValueDescriptor) string {
	prefix := strings.ToUpper(camelToSnake(string(ed.Name()))) + "_"
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix))
}

func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// resolve follows YAML aliases (*name) to the anchored node.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}
