// promcheck checks Prometheus rules and PromQL queries the way promtool does, with
// Prometheus' own parsers, for the chart's tests (scripts/helm builds and caches it).
//
//	promcheck rules FILE   FILE is a Prometheus rule file (groups: ...), YAML or JSON. Every
//	                       problem is printed on stderr (exit 1); otherwise the metric names
//	                       that the rules' expressions select, one per line (exit 0).
//	promcheck exprs        stdin is a JSON array of PromQL expressions (a Grafana
//	                       dashboard's queries: $__rate_interval, $__interval and $__range
//	                       stand for 5m). Every expression that does not parse is printed on
//	                       stderr (exit 1); otherwise the metric names they select.
//
// Exit 2: usage error.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var names map[string]bool
	var errs []string
	switch os.Args[1] {
	case "rules":
		if len(os.Args) != 3 {
			usage()
		}
		names, errs = checkRules(os.Args[2])
	case "exprs":
		if len(os.Args) != 2 {
			usage()
		}
		names, errs = checkExprs(os.Stdin)
	default:
		usage()
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e)
		}
		os.Exit(1)
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		fmt.Println(n)
	}
}

// The parser with Prometheus' defaults (no experimental functions), as promtool's.
var promql = parser.NewParser(parser.Options{})

func usage() {
	fmt.Fprintln(os.Stderr, "usage: promcheck rules FILE | promcheck exprs < queries.json")
	os.Exit(2)
}

func checkRules(path string) (map[string]bool, []string) {
	// Unknown fields are errors; names must be valid for every Prometheus (legacy rules).
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	groups, errs := rulefmt.ParseFile(path, false, model.LegacyValidation, promql, logger)
	if len(errs) > 0 {
		out := make([]string, 0, len(errs))
		for _, e := range errs {
			out = append(out, e.Error())
		}
		return nil, out
	}
	names := map[string]bool{}
	var out []string
	rules := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules++
			expr, err := promql.ParseExpr(r.Expr)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: group %s: %v", path, g.Name, err))
				continue
			}
			selected(expr, names)
		}
	}
	if rules == 0 {
		out = append(out, fmt.Sprintf("%s: no rules", path))
	}
	return names, out
}

// Grafana's interval variables, where a range or a duration stands.
var grafanaInterval = regexp.MustCompile(`\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}`)

func checkExprs(r io.Reader) (map[string]bool, []string) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, []string{fmt.Sprintf("reading stdin: %v", err)}
	}
	var exprs []string
	if err := json.Unmarshal(data, &exprs); err != nil {
		return nil, []string{fmt.Sprintf("stdin is not a JSON array of strings: %v", err)}
	}
	if len(exprs) == 0 {
		return nil, []string{"no expressions"}
	}
	names := map[string]bool{}
	var out []string
	for _, e := range exprs {
		expr, err := promql.ParseExpr(grafanaInterval.ReplaceAllString(e, "5m"))
		if err != nil {
			out = append(out, fmt.Sprintf("%q: %v", e, err))
			continue
		}
		selected(expr, names)
	}
	return names, out
}

// selected adds the metric name of every selector in expr; a selector without a literal
// name is an error of its own kind, reported as the name "".
func selected(expr parser.Expr, names map[string]bool) {
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		names[name] = true
		return nil
	})
}
