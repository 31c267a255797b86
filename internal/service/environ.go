package service

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Environ returns settings (a settings struct or a pointer to one) as the
// ACTLOOP_ environment variables that make envconfig read the same
// values back: how a process starts a service in a child process with a
// configuration built in code. Embedded structs contribute their fields;
// every setting must carry an envconfig tag.
func Environ(settings any) ([]string, error) {
	v := reflect.Indirect(reflect.ValueOf(settings))
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("environ: %T is not a settings struct", settings)
	}
	var env []string
	var walk func(v reflect.Value) error
	walk = func(v reflect.Value) error {
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous && fv.Kind() == reflect.Struct {
				if err := walk(fv); err != nil {
					return err
				}
				continue
			}
			name := f.Tag.Get("envconfig")
			if name == "" || name == "-" {
				return fmt.Errorf("environ: %s.%s has no envconfig tag", v.Type(), f.Name)
			}
			if fv.Kind() == reflect.Slice && fv.Len() == 0 && f.Tag.Get("default") == "" {
				continue // unset reads back as nil; set to "" it would read as empty
			}
			s, err := environValue(fv)
			if err != nil {
				return fmt.Errorf("environ: ACTLOOP_%s: %w", name, err)
			}
			env = append(env, "ACTLOOP_"+name+"="+s)
		}
		return nil
	}
	return env, walk(v)
}

// Settings returns the names of the ACTLOOP_ environment variables that
// settings (a settings struct or a pointer to one) reads, embedded structs
// included.
func Settings(settings any) []string {
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if name := f.Tag.Get("envconfig"); name != "" && name != "-" {
				names = append(names, "ACTLOOP_"+name)
			}
		}
	}
	walk(reflect.Indirect(reflect.ValueOf(settings)).Type())
	return names
}

func environValue(v reflect.Value) (string, error) {
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String(), nil
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), nil
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), nil
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			s, err := environValue(v.Index(i))
			if err != nil {
				return "", err
			}
			if strings.Contains(s, ",") {
				return "", fmt.Errorf("element %q holds a comma, which envconfig would split", s)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("unsupported kind %s", v.Kind())
}
