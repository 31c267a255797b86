package sandbox

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// ImportImage makes the image repo:tag from a root filesystem, a tar
// stream, with changes in Dockerfile syntax ("ENV PATH=..."): POST
// /images/create?fromSrc=-, the engine's docker import, whose answer is a
// JSON progress stream as a pull's.
func (d *Docker) ImportImage(ctx context.Context, repo, tag string, changes []string, rootfs io.Reader) error {
	q := url.Values{"fromSrc": {"-"}, "repo": {repo}, "tag": {tag}, "changes": changes}
	resp, err := d.do(ctx, http.MethodPost, "/images/create", q, rootfs)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := readProgress(resp.Body); err != nil {
		return fmt.Errorf("import %s:%s: %w", repo, tag, err)
	}
	return nil
}

// ImageExists reports whether the engine holds the image ref: GET
// /images/{name}/json, 404 when it does not.
func (d *Docker) ImageExists(ctx context.Context, ref string) (bool, error) {
	err := d.call(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, nil)
	if isStatus(err, http.StatusNotFound) {
		return false, nil
	}
	return err == nil, err
}
