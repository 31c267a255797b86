package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Stream ids in the Docker Engine API's multiplexed stream (the output of
// a non-TTY exec or attach). Each frame is an 8-byte header, [STREAM, 0, 0,
// 0, SIZE (4 bytes, big-endian)], followed by SIZE bytes of payload. See
// "Stream format" under ContainerAttach in the Engine API reference
// (api/docs/v1.41.yaml to v1.55.yaml in moby/moby, unchanged across them).
const (
	streamStdin  = 0
	streamStdout = 1
	streamStderr = 2
)

// errFrame means a multiplexed stream is malformed.
var errFrame = errors.New("docker stream: malformed frame")

// demux copies the payloads of the multiplexed stream r to stdout and
// stderr (which may be the same writer, keeping their order) until r ends
// at a frame boundary. A stream that ends inside a frame is
// io.ErrUnexpectedEOF; an unknown stream id or a non-zero padding byte is
// errFrame. Payloads are streamed, never held whole in memory.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if hdr[1] != 0 || hdr[2] != 0 || hdr[3] != 0 {
			return fmt.Errorf("%w: header % x", errFrame, hdr)
		}
		var dst io.Writer
		switch hdr[0] {
		case streamStdout:
			dst = stdout
		case streamStderr, streamStdin: // stdin frames carry nothing we send; treat them as stderr
			dst = stderr
		default:
			return fmt.Errorf("%w: stream %d", errFrame, hdr[0])
		}
		size := int64(binary.BigEndian.Uint32(hdr[4:]))
		n, err := io.CopyN(dst, r, size)
		if err != nil {
			if errors.Is(err, io.EOF) && n < size {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}
