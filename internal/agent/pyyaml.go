package agent

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// mini-swe-agent reads its configuration with PyYAML's yaml.safe_load,
// which follows YAML 1.1: yes, no, on and off are booleans, 1e3 is a string
// (a float needs a dot), 0755 is octal, 1_000 is an integer. yaml.v3 follows
// YAML 1.2 and reads several of these otherwise, so the sections whose
// values templates see are read from the node tree with PyYAML's rules.
// Source: PyYAML 6.0, yaml/resolver.py (Resolver's implicit resolvers) and
// yaml/constructor.py (SafeConstructor).
var (
	pyYAMLBool  = regexp.MustCompile(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	pyYAMLFloat = regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?` +
		`|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?` +
		`|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*` +
		`|[-+]?\.(?:inf|Inf|INF)` +
		`|\.(?:nan|NaN|NAN))$`)
	pyYAMLInt = regexp.MustCompile(`^(?:[-+]?0b[0-1_]+` +
		`|[-+]?0[0-7_]+` +
		`|[-+]?(?:0|[1-9][0-9_]*)` +
		`|[-+]?0x[0-9a-fA-F_]+` +
		`|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	pyYAMLNull = regexp.MustCompile(`^(?:~|null|Null|NULL|)$`)
)

const (
	tagNull  = "!!null"
	tagBool  = "!!bool"
	tagInt   = "!!int"
	tagFloat = "!!float"
	tagStr   = "!!str"
	tagMerge = "!!merge"
	tagValue = "!!value" // a plain =, which SafeConstructor cannot construct
)

// maxYAMLNodes bounds the nodes one configuration expands to, aliases
// expanded: a file of MaxConfigBytes without aliases holds fewer, each
// value taking a byte at least.
const maxYAMLNodes = MaxConfigBytes

// pyYAMLReader converts yaml.v3 nodes as PyYAML's SafeConstructor does. An
// alias is expanded where it is used, so it keeps the anchors being
// expanded (an anchor that contains itself is an error, as in yaml.v3) and
// counts the nodes it visits (an alias bomb is an error too).
type pyYAMLReader struct {
	expanding    map[*yaml.Node]bool
	nodes, limit int
}

// alias returns the node an alias names, or an error when that node is
// being expanded already or the document expands past maxYAMLNodes; done
// ends its expansion.
func (r *pyYAMLReader) alias(n *yaml.Node) (target *yaml.Node, done func(), err error) {
	if r.expanding[n.Alias] {
		return nil, nil, fmt.Errorf("line %d: anchor %q contains itself", n.Line, n.Value)
	}
	if r.expanding == nil {
		r.expanding = map[*yaml.Node]bool{}
	}
	r.expanding[n.Alias] = true
	return n.Alias, func() { delete(r.expanding, n.Alias) }, nil
}

func (r *pyYAMLReader) count(n *yaml.Node) error {
	if r.nodes++; r.nodes > r.limit {
		return fmt.Errorf("line %d: more than %d values with aliases expanded", n.Line, r.limit)
	}
	return nil
}

// pyYAMLSections returns the values of the top-level keys names as PyYAML's
// safe_load gives them; a section that is absent is missing from the map.
func pyYAMLSections(data []byte, names ...string) (map[string]any, error) {
	return readPyYAML(data, maxYAMLNodes, names)
}

func readPyYAML(data []byte, limit int, names []string) (map[string]any, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if len(root.Content) == 0 {
		return out, nil
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return out, nil
	}
	r := pyYAMLReader{limit: limit}
	pairs, err := r.flattenMapping(top)
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(pairs); i += 2 {
		k, err := r.key(pairs[i])
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if k == name {
				v, err := r.value(pairs[i+1])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				out[name] = v
			}
		}
	}
	return out, nil
}

// value converts a node as SafeConstructor does: a mapping to a
// pyDict, a sequence to a pyList, a scalar to string, int (a *big.Int past
// int64), pyFloat, bool or pyNone. A timestamp stays its text (PyYAML makes
// a date, which prints the same; a date-time prints otherwise), and a tag
// PyYAML's safe loader does not know is read as a string.
func (r *pyYAMLReader) value(n *yaml.Node) (any, error) {
	if err := r.count(n); err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.AliasNode:
		target, done, err := r.alias(n)
		if err != nil {
			return nil, err
		}
		defer done()
		return r.value(target)
	case yaml.SequenceNode:
		l := make(pyList, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := r.value(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.MappingNode:
		pairs, err := r.flattenMapping(n)
		if err != nil {
			return nil, err
		}
		d := make(pyDict, len(pairs)/2)
		for i := 0; i < len(pairs); i += 2 {
			k, err := r.key(pairs[i])
			if err != nil {
				return nil, err
			}
			if d[k], err = r.value(pairs[i+1]); err != nil {
				return nil, err
			}
		}
		return d, nil
	case yaml.ScalarNode:
		return pyYAMLScalar(n)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

// key returns a mapping key as a string: Python's str of the key's value
// (dict keys other than strings are rare in a configuration).
func (r *pyYAMLReader) key(n *yaml.Node) (string, error) {
	v, err := r.value(n)
	if err != nil {
		return "", err
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	return pyRepr(v), nil
}

// flattenMapping returns n's key and value nodes, alternating, with its
// merge keys (<<) replaced by the pairs they merge, first, as PyYAML's
// flatten_mapping does; a later pair overrides an earlier one with the
// same key.
func (r *pyYAMLReader) flattenMapping(n *yaml.Node) ([]*yaml.Node, error) {
	var merged, own []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if scalarTag(k) != tagMerge {
			own = append(own, k, v)
			continue
		}
		var maps []*yaml.Node
		if v.Kind == yaml.SequenceNode {
			// The first mapping listed wins, so it is merged last.
			for j := len(v.Content) - 1; j >= 0; j-- {
				maps = append(maps, v.Content[j])
			}
		} else {
			maps = append(maps, v)
		}
		for _, m := range maps {
			p, err := r.mergePairs(m)
			if err != nil {
				return nil, err
			}
			merged = append(merged, p...)
		}
	}
	return append(merged, own...), nil
}

// mergePairs returns the pairs a merge key takes from m, a mapping or an
// alias of one.
func (r *pyYAMLReader) mergePairs(m *yaml.Node) ([]*yaml.Node, error) {
	if err := r.count(m); err != nil {
		return nil, err
	}
	switch m.Kind {
	case yaml.AliasNode:
		target, done, err := r.alias(m)
		if err != nil {
			return nil, err
		}
		defer done()
		return r.mergePairs(target)
	case yaml.MappingNode:
		return r.flattenMapping(m)
	}
	return nil, fmt.Errorf("line %d: a merge key takes a mapping or a list of mappings", m.Line)
}

// scalarTag returns the tag PyYAML gives a scalar node: its explicit tag,
// !!str when quoted or a block scalar, else what its text resolves to.
func scalarTag(n *yaml.Node) string {
	switch {
	case n.Kind != yaml.ScalarNode:
		return ""
	case n.Style&yaml.TaggedStyle != 0:
		return n.Tag
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return tagStr
	}
	return resolvePlain(n.Value)
}

// resolvePlain is PyYAML's implicit resolution of a plain scalar.
func resolvePlain(s string) string {
	switch {
	case pyYAMLBool.MatchString(s):
		return tagBool
	case pyYAMLFloat.MatchString(s):
		return tagFloat
	case pyYAMLInt.MatchString(s):
		return tagInt
	case s == "<<":
		return tagMerge
	case s == "=":
		return tagValue
	case pyYAMLNull.MatchString(s):
		return tagNull
	}
	return tagStr
}

func pyYAMLScalar(n *yaml.Node) (any, error) {
	s := n.Value
	switch scalarTag(n) {
	case tagNull:
		return pyNone{}, nil
	case tagBool:
		switch strings.ToLower(s) {
		case "yes", "true", "on":
			return true, nil
		case "no", "false", "off":
			return false, nil
		}
	case tagInt:
		if v, ok := pyYAMLInt64(s); ok {
			return v, nil
		}
	case tagFloat:
		if f, ok := pyYAMLFloat64(s); ok {
			return pyFloat(f), nil
		}
	case tagValue:
		return nil, fmt.Errorf("line %d: PyYAML cannot construct a plain =; quote it", n.Line)
	default:
		return s, nil
	}
	return nil, fmt.Errorf("line %d: %q is not a valid %s", n.Line, s, scalarTag(n))
}

// pyYAMLInt64 is SafeConstructor.construct_yaml_int: an int, or a *big.Int
// when the value does not fit.
func pyYAMLInt64(s string) (any, bool) {
	s = strings.ReplaceAll(s, "_", "")
	neg := strings.HasPrefix(s, "-")
	if neg || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	n := new(big.Int)
	ok := true
	switch {
	case s == "":
		return nil, false
	case s == "0":
	case strings.HasPrefix(s, "0b"):
		_, ok = n.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = n.SetString(s[2:], 16)
	case s[0] == '0':
		_, ok = n.SetString(s, 8)
	case strings.Contains(s, ":"):
		for part := range strings.SplitSeq(s, ":") {
			d, err := strconv.ParseInt(part, 10, 64)
			if err != nil {
				return nil, false
			}
			n.Mul(n, big.NewInt(60)).Add(n, big.NewInt(d))
		}
	default:
		_, ok = n.SetString(s, 10)
	}
	if !ok {
		return nil, false
	}
	if neg {
		n.Neg(n)
	}
	if n.IsInt64() && n.Int64() >= math.MinInt && n.Int64() <= math.MaxInt {
		return int(n.Int64()), true
	}
	return n, true
}

// pyYAMLFloat64 is SafeConstructor.construct_yaml_float.
func pyYAMLFloat64(s string) (float64, bool) {
	s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
	sign := 1.0
	if strings.HasPrefix(s, "-") {
		sign = -1
	}
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	switch {
	case s == ".inf":
		return sign * math.Inf(1), true
	case s == ".nan":
		return math.NaN(), true
	case strings.Contains(s, ":"):
		v := 0.0
		for part := range strings.SplitSeq(s, ":") {
			d, err := strconv.ParseFloat(part, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return 0, false
			}
			v = v*60 + d
		}
		return sign * v, true
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) { // ±Inf or 0, as Python's float() gives
		return 0, false
	}
	return sign * v, true
}
