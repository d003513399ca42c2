package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoValue renders a wire API message for -o json: protojson with the
// .proto field names, then two changes a script expects. 64-bit integers
// (indexes, nanosecond times, bytes), which protojson writes as strings,
// become JSON numbers (they are exact in JSON; a reader in a language with
// only float64 loses precision above 2^53, as with any JSON number). A
// task's result, which is JSON bytes (base64 in protojson), is embedded as
// JSON.
func protoValue(m proto.Message) (any, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(m.ProtoReflect().Descriptor(), v), nil
}

// numbers walks v, the protojson of a message of type md, converting 64-bit
// integer fields to numbers and JSON results to embedded JSON.
func numbers(md protoreflect.MessageDescriptor, v any) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for k, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			continue
		}
		conv := func(x any, fd protoreflect.FieldDescriptor) any {
			switch fd.Kind() {
			case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind, protoreflect.Fixed64Kind,
				protoreflect.Sfixed64Kind:
				if s, ok := x.(string); ok {
					return json.Number(s)
				}
			case protoreflect.BytesKind:
				if s, ok := x.(string); ok && fd.Name() == "result" {
					if raw, err := base64.StdEncoding.DecodeString(s); err == nil && json.Valid(raw) {
						return json.RawMessage(raw)
					}
				}
			case protoreflect.MessageKind:
				return numbers(fd.Message(), x)
			}
			return x
		}
		switch {
		case fd.IsMap():
			if mv, ok := val.(map[string]any); ok {
				for mk, x := range mv {
					mv[mk] = conv(x, fd.MapValue())
				}
			}
		case fd.IsList():
			if lv, ok := val.([]any); ok {
				for i, x := range lv {
					lv[i] = conv(x, fd)
				}
			}
		default:
			obj[k] = conv(val, fd)
		}
	}
	return obj
}
