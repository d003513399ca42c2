package spec

import "github.com/megaflow/megaflow/internal/errs"

// ServiceEnvPrefix starts the name of every environment variable that
// carries a service's endpoints to the tasks that use it.
const ServiceEnvPrefix = "MEGAFLOW_SERVICE_"

// ServiceEnvVar returns the environment variable that carries the ready
// endpoints of service name to each task naming it in uses_services:
// ServiceEnvPrefix and the name upper-cased, every byte other than an ASCII
// letter or digit turned into '_' ("model/qwen-7b" gives
// MEGAFLOW_SERVICE_MODEL_QWEN_7B). Its value is the endpoints
// ("http://host:port"), sorted and comma-separated. The head sets it in
// each assignment; demo and user code read it.
func ServiceEnvVar(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return ServiceEnvPrefix + string(b)
}

// CheckServiceName returns an InvalidArgument error if name is not a
// service name ("/"-separated identifiers such as "model/qwen-7b", at most
// DefaultLimits().MaxNameLen bytes), saying what is wrong; nil otherwise.
// ListServices and the CLI check a name filter with it.
func CheckServiceName(name string) error {
	if p := serviceNameProblem(name, DefaultLimits().MaxNameLen); p != "" {
		return errs.New(errs.InvalidArgument, "service name: %s", p)
	}
	return nil
}
