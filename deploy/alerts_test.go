package deploy_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	texttemplate "text/template"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// alertsFile holds the example alerts on safe-ipam detect's metrics.
const alertsFile = "safe-ipam-detect-alerts.yaml"

// runbookBase is where every alert's runbook_url points: an entry of
// docs/operations.md's runbook section, by its anchor.
const runbookBase = "https://github.com/safe-ipam/safe-ipam/blob/main/docs/operations.md#"

// The metrics an alert on a finding kind, and on an unknown kind, reads.
const (
	findingsMetric = "safe_ipam_detect_findings"
	unknownMetric  = "safe_ipam_detect_unknown"
)

// prometheusRule is the part of the Operator's PrometheusRule the file
// uses; decoded strictly, a misspelt field fails instead of being
// dropped by the Operator.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// alertRule is one rule of a group, as Prometheus reads it.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alert is one rule with its expression parsed.
type alert struct {
	alertRule
	expr parser.Expr
}

func detectAlerts(t *testing.T) []alert {
	t.Helper()
	var pr prometheusRule
	decodeStrict(t, alertsFile, &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("%s/%s; want a monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	var out []alert
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			expr, err := parser.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: expr %q does not parse as PromQL: %v", r.Alert, r.Expr, err)
				continue
			}
			out = append(out, alert{alertRule: r, expr: expr})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no alert that parses", alertsFile)
	}
	return out
}

// selectors are the series selectors an expression reads, absent()'s
// and a range's included.
func selectors(expr parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// metricName is the name a selector reads: written before the braces,
// or as an equality on __name__ ("" for anything else).
func metricName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// served are the series names safe-ipam detect's metrics register, each
// with its label names, as a scrape shows them: a histogram's or a
// summary's by the suffixed names it is read under.
func served(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := admindetect.NewMetrics(reg)
	m.Observe(detect.Report{}) // a round, so that the counter by result has a series
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering safe-ipam detect's metrics: %v", err)
	}
	out := map[string][]string{}
	for _, f := range families {
		var names []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			names = append(names, l.GetName())
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[f.GetName()+"_bucket"] = append(slices.Clone(names), "le")
			out[f.GetName()+"_sum"], out[f.GetName()+"_count"] = names, names
		case dto.MetricType_SUMMARY:
			out[f.GetName()] = append(slices.Clone(names), "quantile")
			out[f.GetName()+"_sum"], out[f.GetName()+"_count"] = names, names
		default:
			out[f.GetName()] = names
		}
	}
	if len(out) < 4 {
		t.Fatalf("safe-ipam detect serves %v; the scan is broken", out)
	}
	return out
}

// Every alert is one Prometheus loads and Alertmanager can render: its
// expression parses as PromQL and gives a vector, its `for` is a
// Prometheus duration, its severity one to route on, and its summary and
// description are templates that parse.
func TestDetectAlertsAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range detectAlerts(t) {
		if !strings.HasPrefix(a.Alert, "SafeIPAM") || seen[a.Alert] {
			t.Errorf("alert %q: want a unique name starting SafeIPAM", a.Alert)
		}
		seen[a.Alert] = true
		if typ := a.expr.Type(); typ != parser.ValueTypeVector {
			t.Errorf("%s: expr %q gives a %s; an alerting rule needs a vector", a.Alert, a.Expr, typ)
		}
		if _, err := model.ParseDuration(a.For); err != nil {
			t.Errorf("%s: for %q: %v", a.Alert, a.For, err)
		}
		if s := a.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q; want critical or warning", a.Alert, s)
		}
		for _, key := range []string{"summary", "description"} {
			if a.Annotations[key] == "" {
				t.Errorf("%s has no %s", a.Alert, key)
			} else if err := parseAlertTemplate(a.Annotations[key]); err != nil {
				t.Errorf("%s: %s does not parse as Prometheus expands it: %v", a.Alert, key, err)
			}
		}
	}
}

// parseAlertTemplate parses an annotation as Prometheus expands it: with
// $labels, $value and the rest defined first, and its functions (their
// names only: nothing runs).
func parseAlertTemplate(text string) error {
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	funcs := texttemplate.FuncMap{}
	for _, name := range []string{"args", "externalURL", "first", "graphLink", "humanize", "humanize1024", "humanizeDuration",
		"humanizePercentage", "humanizeTimestamp", "label", "match", "now", "parseDuration", "pathPrefix", "query",
		"reReplaceAll", "safeHtml", "sortByLabel", "stripDomain", "stripPort", "strvalue", "tableLink", "title",
		"toDuration", "toLower", "toTime", "toUpper", "urlUnescape", "value"} {
		funcs[name] = func(...any) any { return nil }
	}
	_, err := texttemplate.New("annotation").Funcs(funcs).Parse(defs + text)
	return err
}

// Every series an alert reads is one safe-ipam detect serves, with its
// own labels, and every kind it names is a kind the check reports: a
// misspelt name selects nothing, and an alert on nothing never fires.
func TestDetectAlertsReadTheMetricsTheCheckServes(t *testing.T) {
	metrics := served(t)
	for _, a := range detectAlerts(t) {
		vss := selectors(a.expr)
		if len(vss) == 0 {
			t.Errorf("%s: expr %q reads no series", a.Alert, a.Expr)
		}
		for _, vs := range vss {
			name := metricName(vs)
			labelNames, ok := metrics[name]
			if !ok {
				t.Errorf("%s reads %q, which safe-ipam detect does not serve (it serves %v)", a.Alert, vs, slices.Sorted(maps.Keys(metrics)))
				continue
			}
			for _, m := range vs.LabelMatchers {
				switch {
				case m.Name == labels.MetricName:
				case !slices.Contains(labelNames, m.Name):
					t.Errorf("%s: %s has no label %q (its labels: %v)", a.Alert, name, m.Name, labelNames)
				case m.Name == "kind" && !slices.ContainsFunc(detect.Kinds, func(k detect.Kind) bool { return m.Matches(string(k)) }):
					t.Errorf("%s: %s matches no kind the check reports (%v)", a.Alert, m, detect.Kinds)
				}
			}
		}
	}
}

// selectsKind says whether vs reads metric's series of kind k: every
// matcher on kind matches it (a selector without one reads every kind).
func selectsKind(vs *parser.VectorSelector, metric string, k detect.Kind) bool {
	return metricName(vs) == metric && !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
		return m.Name == "kind" && !m.Matches(string(k))
	})
}

// kindAlerts are the alerts on findings of k alone: their expressions
// select that kind by name.
func kindAlerts(alerts []alert, k detect.Kind) []*alert {
	var out []*alert
	for i := range alerts {
		if slices.ContainsFunc(selectors(alerts[i].expr), func(vs *parser.VectorSelector) bool {
			return metricName(vs) == findingsMetric && slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
				return m.Name == "kind" && m.Type == labels.MatchEqual && m.Value == string(k)
			})
		}) {
			out = append(out, &alerts[i])
		}
	}
	return out
}

// Every kind the check reports (detect.Kinds) has its own alert on its
// findings, whose description names the kind's Event reason, and an
// alert for while it is unknown (unknown is never clean: the kind's own
// alert can then neither fire nor resolve).
func TestEveryKindHasItsAlerts(t *testing.T) {
	alerts := detectAlerts(t)
	for _, k := range detect.Kinds {
		own := kindAlerts(alerts, k)
		if len(own) != 1 {
			t.Errorf("%d alerts on %s{kind=%q}; want one per kind the check reports", len(own), findingsMetric, k)
		}
		reason := admindetect.Reasons[k]
		if reason == "" {
			t.Errorf("the check posts no Event reason for %s", k)
		}
		for _, a := range own {
			if !strings.Contains(a.Annotations["description"], reason) {
				t.Errorf("%s: the description does not name the Events' reason for %s, %q", a.Alert, k, reason)
			}
		}
		if !slices.ContainsFunc(alerts, func(a alert) bool {
			return slices.ContainsFunc(selectors(a.expr), func(vs *parser.VectorSelector) bool { return selectsKind(vs, unknownMetric, k) })
		}) {
			t.Errorf("no alert reads %s for %s", unknownMetric, k)
		}
	}
}

// runbook is docs/operations.md's section "Alerts: the runbook": each
// entry's body by the anchor of its heading, and the heading's text.
func runbook(t *testing.T) (bodies, headings map[string]string) {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Alerts: the runbook\n")
	if !ok {
		t.Fatal(`docs/operations.md has no section "## Alerts: the runbook"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	bodies, headings = map[string]string{}, map[string]string{}
	for _, entry := range strings.Split(section, "\n### ")[1:] {
		heading, body, _ := strings.Cut(entry, "\n")
		bodies[anchor(heading)], headings[anchor(heading)] = body, heading
	}
	return bodies, headings
}

// anchor is the id GitHub gives a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func anchor(heading string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == ' ':
			return '-'
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			return unicode.ToLower(r)
		}
		return -1
	}, heading)
}

// Every alert's runbook_url is its own entry in docs/operations.md's
// runbook, a heading with the alert's name, and every entry is an
// alert's; the entry of a kind's alert says how to find its Events, by
// the reason the check posts them with.
func TestDetectAlertsLinkTheirRunbook(t *testing.T) {
	alerts := detectAlerts(t)
	bodies, headings := runbook(t)
	for _, a := range alerts {
		url := a.Annotations["runbook_url"]
		id, ok := strings.CutPrefix(url, runbookBase)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q; want %s<anchor>", a.Alert, url, runbookBase)
		case headings[id] == "":
			t.Errorf("%s: runbook_url %q: docs/operations.md's runbook has no heading with the anchor #%s", a.Alert, url, id)
		case headings[id] != a.Alert:
			t.Errorf("%s: runbook_url %q is the entry of %q", a.Alert, url, headings[id])
		}
	}
	for id, heading := range headings {
		if !slices.ContainsFunc(alerts, func(a alert) bool { return a.Alert == heading }) {
			t.Errorf("the runbook's entry #%s (%q) is no alert of %s", id, heading, alertsFile)
		}
	}
	for _, k := range detect.Kinds {
		for _, a := range kindAlerts(alerts, k) {
			if want := "reason=" + admindetect.Reasons[k]; !strings.Contains(bodies[anchor(a.Alert)], want) {
				t.Errorf("the runbook's entry of %s does not list its Events (%s)", a.Alert, want)
			}
		}
	}
}
