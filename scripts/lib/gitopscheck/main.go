// gitopscheck computes the health that GitOps tools see for a Kubernetes object, with
// those tools' own code, for the cluster tests (scripts/gitops builds and caches it).
//
//	gitopscheck kstatus [FILE|-]          kstatus (sigs.k8s.io/cli-utils, the library behind
//	                                      Flux's health checks): status.Compute on the object
//	gitopscheck argocd SCRIPT [FILE|-]    an Argo CD health check (Lua) run with gopher-lua the
//	                                      way Argo CD runs one: the object as global `obj`,
//	                                      only the base, table and package libraries, 1 s limit
//
// The object is JSON or YAML (one object) read from FILE or stdin. The verdict is printed
// as one JSON line, {"status": "...", "message": "..."} (exit 0). Exit 1: the object or
// the script is unusable (the reason on stderr); exit 2: usage error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var v verdict
	var err error
	switch os.Args[1] {
	case "kstatus":
		if len(os.Args) > 3 {
			usage()
		}
		v, err = kstatus(inputArg(2))
	case "argocd":
		if len(os.Args) < 3 || len(os.Args) > 4 {
			usage()
		}
		v, err = argocd(os.Args[2], inputArg(3))
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gitopscheck:", err)
		os.Exit(1)
	}
	out, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gitopscheck:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gitopscheck kstatus [FILE|-] | gitopscheck argocd SCRIPT [FILE|-]")
	os.Exit(2)
}

func inputArg(i int) string {
	if len(os.Args) > i {
		return os.Args[i]
	}
	return "-"
}

func readObject(path string) (*unstructured.Unstructured, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the object: %w", err)
	}
	// YAML is turned into JSON, and the JSON is decoded as client-go decodes what the API
	// server sends (integers as int64), as in the objects that Flux and Argo CD look at.
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("the object is neither JSON nor YAML: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	return obj, nil
}

func kstatus(path string) (verdict, error) {
	obj, err := readObject(path)
	if err != nil {
		return verdict{}, err
	}
	res, err := status.Compute(obj)
	if err != nil {
		return verdict{}, fmt.Errorf("kstatus: %w", err)
	}
	return verdict{Status: res.Status.String(), Message: res.Message}, nil
}

// The statuses Argo CD accepts from a health script.
var argoStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true,
	"Missing": true, "Unknown": true,
}

func argocd(script, path string) (verdict, error) {
	src, err := os.ReadFile(script)
	if err != nil {
		return verdict{}, fmt.Errorf("cannot read the health script: %w", err)
	}
	obj, err := readObject(path)
	if err != nil {
		return verdict{}, err
	}
	// As Argo CD's util/lua: no standard library but these, a context with a deadline.
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true},
			lua.LString(lib.name)); err != nil {
			return verdict{}, fmt.Errorf("opening the Lua library %q: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj.Object))
	if err := l.DoString(string(src)); err != nil {
		return verdict{}, fmt.Errorf("the health script failed: %w", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return verdict{}, fmt.Errorf("the health script returned %s, not a table", l.Get(-1).Type())
	}
	st, ok := ret.RawGetString("status").(lua.LString)
	if !ok || !argoStatuses[string(st)] {
		return verdict{}, fmt.Errorf("the health script returned status %v, not one Argo CD knows", ret.RawGetString("status"))
	}
	msg := ""
	if m, ok := ret.RawGetString("message").(lua.LString); ok {
		msg = string(m)
	}
	return verdict{Status: string(st), Message: msg}, nil
}

// decodeValue turns a decoded object into Lua values as Argo CD's util/lua does.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch value := value.(type) {
	case float64:
		return lua.LNumber(value)
	case int64:
		return lua.LNumber(float64(value))
	case string:
		return lua.LString(value)
	case bool:
		return lua.LBool(value)
	case nil:
		return lua.LNil
	case []any:
		arr := l.CreateTable(len(value), 0)
		for _, item := range value {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(value))
		for key, item := range value {
			tbl.RawSetString(key, decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}
