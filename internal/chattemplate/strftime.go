package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// strftime formats t as Python's datetime.strftime does in the C locale,
// including glibc's "%-d" (no padding) used by Llama 3 templates. An
// unknown directive is an error naming it rather than text Python would
// not produce.
func strftime(t time.Time, format string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			b.WriteByte('%') // Python keeps a lone trailing '%'
			break
		}
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(v, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, v)
			} else {
				b.WriteString(strconv.Itoa(v))
			}
		}
		switch d := format[i]; d {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			w := int(t.Weekday())
			if w == 0 {
				w = 7
			}
			b.WriteString(strconv.Itoa(w))
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			_, off := t.Zone()
			sign := '+'
			if off < 0 {
				sign, off = '-', -off
			}
			fmt.Fprintf(&b, "%c%02d%02d", sign, off/3600, off/60%60)
		case 'F':
			fmt.Fprintf(&b, "%04d-%02d-%02d", t.Year(), t.Month(), t.Day())
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime_now: directive %%%c: %w", d, ErrUnsupported)
		}
	}
	return b.String(), nil
}
