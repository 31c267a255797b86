package agent

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Expected values are Python 3.11's repr.
func TestPyRepr(t *testing.T) {
	big20, _ := new(big.Int).SetString("100000000000000000000", 10)
	tests := []struct {
		in   any
		want string
	}{
		{"", `''`},
		{"it's", `"it's"`},
		{`say "hi"`, `'say "hi"'`},
		{`both ' and "`, `'both \' and "'`},
		{`back\slash`, `'back\\slash'`},
		{"tab\tnl\ncr\r", `'tab\tnl\ncr\r'`},
		{"\x00\x1f\x7f", `'\x00\x1f\x7f'`},
		{"\u0080\u0085\u009f\u00a0\u00ad\u00e9\u00ff", `'\x80\x85\x9f\xa0\xadéÿ'`},
		{"\u0100\u200b\u2028\u3000\ufeff\uffff", `'Ā\u200b\u2028\u3000\ufeff\uffff'`},
		{"\U0001F600\U000E0001\U0010FFFF", `'😀\U000e0001\U0010ffff'`},
		{"\xff", `'�'`}, // an invalid byte, as Python's errors="replace" decodes it
		{0.0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {1.0, "1.0"}, {0.1, "0.1"}, {1.0 / 3, "0.3333333333333333"},
		{1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {123456789012345678.0, "1.2345678901234568e+17"},
		{0.0001, "0.0001"}, {0.00001, "1e-05"}, {1.5e-7, "1.5e-07"}, {1e22, "1e+22"},
		{math.NaN(), "nan"}, {math.Inf(1), "inf"}, {math.Inf(-1), "-inf"}, {pyFloat(2.5), "2.5"},
		{true, "True"}, {false, "False"}, {nil, "None"}, {pyNone{}, "None"}, {7, "7"}, {big20, "100000000000000000000"},
		{pyList{"a", 1, pyNone{}, pyList{}, pyDict{}}, "['a', 1, None, [], {}]"},
		{pyDict{"b": "x'", "a": pyList{1.5}}, `{'a': [1.5], 'b': "x'"}`},
		{outputDict{"action": "ls", "returncode": 0, "output": "ok\n"}, `{'output': 'ok\n', 'returncode': 0, 'action': 'ls'}`},
	}
	for _, tt := range tests {
		if got := pyRepr(tt.in); got != tt.want {
			t.Errorf("pyRepr(%#v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// Expected values are PyYAML 6.0's safe_load of "k: <text>".
func TestPyYAMLScalars(t *testing.T) {
	big20, _ := new(big.Int).SetString("100000000000000000000", 10)
	bigNeg, _ := new(big.Int).SetString("-9223372036854775809", 10)
	tests := []struct {
		text    string
		want    any
		wantErr bool
	}{
		{text: "0.", want: pyFloat(0)}, {text: "3.", want: pyFloat(3)}, {text: ".5", want: pyFloat(.5)},
		{text: "1.e+5", want: pyFloat(1e5)}, {text: "1_0.5", want: pyFloat(10.5)}, {text: "-.inf", want: pyFloat(math.Inf(-1))},
		{text: "+.INF", want: pyFloat(math.Inf(1))}, {text: "-.nan", want: "-.nan"}, {text: "1:30.5", want: pyFloat(90.5)},
		{text: "1e3", want: "1e3"}, {text: "1.0e3", want: "1.0e3"}, {text: "1.0e+3", want: pyFloat(1000)}, {text: "+.5", want: "+.5"},
		{text: "yes", want: true}, {text: "No", want: false}, {text: "ON", want: true}, {text: "oFF", want: "oFF"},
		{text: "y", want: "y"}, {text: "True", want: true},
		{text: "~", want: pyNone{}}, {text: "null", want: pyNone{}}, {text: "NULL", want: pyNone{}}, {text: "nUll", want: "nUll"}, {text: "", want: pyNone{}},
		{text: "0", want: 0}, {text: "-0", want: 0}, {text: "+12", want: 12}, {text: "1_000", want: 1000}, {text: "0755", want: 493},
		{text: "08", want: "08"}, {text: "0o17", want: "0o17"}, {text: "0x1F", want: 31}, {text: "0xff_ff", want: 65535},
		{text: "-0b101", want: -5}, {text: "1:30", want: 90}, {text: "1:60", want: "1:60"}, {text: "190:20:30", want: 685230},
		{text: "100000000000000000000", want: big20}, {text: "-9223372036854775809", want: bigNeg},
		{text: "2001-12-14", want: "2001-12-14"}, // a date in PyYAML, which prints the same
		{text: "<<x", want: "<<x"}, {text: "1__", want: 1}, {text: "._5", want: "._5"}, {text: "1.2.3", want: "1.2.3"}, {text: ".", want: "."},
		{text: "'yes'", want: "yes"}, {text: `"0."`, want: "0."}, {text: "!!str 1", want: "1"}, {text: "!!float 1", want: pyFloat(1)},
		{text: "=", wantErr: true}, {text: "0b_", wantErr: true}, {text: "0x_", wantErr: true},
	}
	for _, tt := range tests {
		got, err := pyYAMLSections([]byte("k: "+tt.text+"\n"), "k")
		if tt.wantErr {
			if err == nil {
				t.Errorf("%q: got %#v, want an error", tt.text, got["k"])
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.text, err)
			continue
		}
		if g, w := fmt.Sprintf("%T %s", got["k"], pyRepr(got["k"])), fmt.Sprintf("%T %s", tt.want, pyRepr(tt.want)); g != w {
			t.Errorf("%q = %s, want %s", tt.text, g, w)
		}
	}
}

// Merge keys as PyYAML's flatten_mapping applies them: merged pairs first,
// the mapping's own win, and of a merged list the first mapping wins.
func TestPyYAMLMerge(t *testing.T) {
	doc := "a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nk:\n  <<: [*a, *b]\n  x: 3\n"
	got, err := pyYAMLSections([]byte(doc), "k")
	if err != nil {
		t.Fatal(err)
	}
	if s := pyRepr(got["k"]); s != "{'x': 3, 'y': 1, 'z': 2}" {
		t.Errorf("k = %s", s)
	}
}

// Aliases are expanded where they are used, within a bound.
func TestPyYAMLAliasBomb(t *testing.T) {
	doc := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 'b'; i <= 'e'; i++ {
		doc += fmt.Sprintf("%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	if _, err := readPyYAML([]byte(doc+"k: *e\n"), 10000, []string{"k"}); err == nil || !strings.Contains(err.Error(), "aliases expanded") {
		t.Errorf("readPyYAML(100,000 values, limit 10,000) = %v, want an error about aliases", err)
	}
	if _, err := readPyYAML([]byte(doc+"k: *c\n"), 10000, []string{"k"}); err != nil {
		t.Errorf("readPyYAML(1,000 values, limit 10,000) = %v", err)
	}
}

// FuzzPyRepr checks that a string's repr reads back as the string (with a
// reader of Python's string literals) and never breaks the quoting.
func FuzzPyRepr(f *testing.F) {
	for _, s := range []string{"", "it's", `both ' and "`, "\\\n\t\r\x00\x7f", "\u0085\u00a0é€😀\u200b\U000E0001", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := pyRepr(s)
		got, err := unquotePython(r)
		if err != nil {
			t.Fatalf("pyRepr(%q) = %s: %v", s, r, err)
		}
		// Each invalid byte reads back as one U+FFFD, as ranging over s yields.
		if want := string([]rune(s)); got != want {
			t.Fatalf("pyRepr(%q) = %s reads back as %q", s, r, got)
		}
	})
}

// unquotePython reads a Python string literal as repr writes it.
func unquotePython(lit string) (string, error) {
	if len(lit) < 2 || lit[0] != lit[len(lit)-1] || (lit[0] != '\'' && lit[0] != '"') {
		return "", fmt.Errorf("not quoted")
	}
	q, body := lit[0], lit[1:len(lit)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == q {
			return "", fmt.Errorf("unescaped quote at %d", i)
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(body) {
			return "", fmt.Errorf("trailing backslash")
		}
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[body[i]]
		switch {
		case body[i] == '\\' || body[i] == '\'' || body[i] == '"':
			b.WriteByte(body[i])
		case body[i] == 't':
			b.WriteByte('\t')
		case body[i] == 'n':
			b.WriteByte('\n')
		case body[i] == 'r':
			b.WriteByte('\r')
		case n > 0 && i+n < len(body):
			r, err := strconv.ParseUint(body[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", err
			}
			b.WriteRune(rune(r))
			i += n
		default:
			return "", fmt.Errorf("unknown escape \\%c", body[i])
		}
	}
	return b.String(), nil
}

// FuzzPyYAMLScalar reads any plain scalar as PyYAML would: no panic, and a
// value of the type its tag names.
func FuzzPyYAMLScalar(f *testing.F) {
	for _, s := range []string{"0.", "1_000", "0755", "0x_", "1:30.5", ".NaN", "yes", "~", "2001-12-14", "190:20:30", "-0b101", "99999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := pyYAMLScalar(&yaml.Node{Kind: yaml.ScalarNode, Value: s})
		if err != nil {
			return
		}
		var ok bool
		switch resolvePlain(s) {
		case tagNull:
			_, ok = v.(pyNone)
		case tagBool:
			_, ok = v.(bool)
		case tagInt:
			switch v.(type) {
			case int, *big.Int:
				ok = true
			}
		case tagFloat:
			_, ok = v.(pyFloat)
		default:
			ok = v == s
		}
		if !ok {
			t.Fatalf("%q (%s) read as %T %v", s, resolvePlain(s), v, v)
		}
	})
}
