package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// image returns the image of a sandbox whose Spec names want: want if
// the configuration allows it, the default image if want is "".
func (d *Docker) image(want string) (string, error) {
	image := cmp.Or(want, d.cfg.Image)
	switch {
	case image == "":
		return "", errors.New("no image (Spec.Image or DockerConfig.Image)")
	case !imageAllowed(image, d.cfg.Image, d.cfg.Images):
		return "", fmt.Errorf("%w: %q is not the default image and matches no entry of ACTLOOP_SANDBOX_IMAGES (DockerConfig.Images)",
			ErrImageNotAllowed, image)
	}
	return image, nil
}

// dockerTmpfsOptions are the mount options of the in-memory filesystems
// besides their size: exec, since agents build and run programs there
// (the engine's default for Tmpfs is noexec), but no set-uid files or
// device nodes.
const dockerTmpfsOptions = "rw,exec,nosuid,nodev"

// createBody is the body of POST /containers/create for a sandbox.
//
// The container runs as cfg.User with every capability dropped and
// no-new-privileges (so set-uid binaries such as sudo do not raise it),
// on a read-only root filesystem. It writes to two size-limited in-memory
// filesystems only, besides the engine's /dev/shm:
//
//   - WorkDir, an anonymous volume of the local driver backed by tmpfs,
//     owned by the user, removed with the container (DELETE ?v=true). A
//     volume, not a Tmpfs entry, because the workspace and the patch are
//     copied in with PUT /containers/{id}/archive: the engine extracts an
//     archive on a read-only root only into a volume, and what it would
//     write under a Tmpfs mount is not what the container sees.
//   - /tmp, a Tmpfs entry (scratch files, the exec wrapper's pid files).
//
// The container has a cgroup namespace of its own (CgroupnsMode
// "private", API 1.41): left to the engine, a cgroup v1 host's default
// is the host's namespace, where /proc/self/cgroup shows the container's
// place in the host's hierarchy (/docker/<container id>).
//
// HOME is /tmp unless the Spec sets it, since the image's home
// directories are read-only. StorageOpt (a quota on the container's
// writable layer) is not set: nothing can write to that layer, and only
// some storage drivers accept it (overlay2 on xfs with pquota).
func (d *Docker) createBody(id, image string, specEnv map[string]string, serve bool) dockerCreate {
	c := dockerCreate{
		Image: image, User: d.cfg.User,
		Entrypoint: []string{}, Cmd: []string{"sleep", "infinity"}, WorkingDir: d.cfg.WorkDir,
		Env:             envList(map[string]string{"HOME": "/tmp"}, specEnv),
		Labels:          map[string]string{dockerLabel: id},
		NetworkDisabled: !d.cfg.Network,
		HostConfig: dockerHostConfig{
			Init:           true, // reaps the orphans of killed commands
			CgroupnsMode:   "private",
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			ReadonlyRootfs: true,
			Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("%s,size=%dm,mode=1777", dockerTmpfsOptions, d.cfg.TmpSizeMB)},
		},
	}
	work := dockerMount{Type: "volume", Target: d.cfg.WorkDir}
	// NoCopy: the workspace starts empty (Spec.Workspace ""), whatever the
	// image holds at WorkDir; copying that would also give the volume the
	// image directory's owner.
	work.VolumeOptions.NoCopy = true
	work.VolumeOptions.Labels = map[string]string{dockerLabel: id}
	work.VolumeOptions.DriverConfig.Name = "local"
	work.VolumeOptions.DriverConfig.Options = map[string]string{
		"type": "tmpfs", "device": "tmpfs",
		"o": fmt.Sprintf("%s,size=%dm,uid=%d,gid=%d,mode=0755", dockerTmpfsOptions, d.cfg.WorkDirSizeMB, d.uid, d.gid),
	}
	hc := &c.HostConfig
	hc.Mounts = []dockerMount{work}
	if serve { // the forwarder's volume (docker_serve.go), the root being read-only
		fw := dockerMount{Type: "volume", Target: DockerServeDir}
		fw.VolumeOptions.NoCopy = true
		fw.VolumeOptions.Labels = map[string]string{dockerLabel: id}
		fw.VolumeOptions.DriverConfig.Name = "local"
		fw.VolumeOptions.DriverConfig.Options = map[string]string{
			"type": "tmpfs", "device": "tmpfs", "o": fmt.Sprintf("%s,size=%dm,mode=0755", dockerTmpfsOptions, dockerServeDirMB),
		}
		hc.Mounts = append(hc.Mounts, fw)
	}
	if !d.cfg.Network {
		hc.NetworkMode = "none"
	}
	if mb := d.cfg.Limits.MemoryMB; mb > 0 {
		hc.Memory = int64(mb) << 20
		hc.MemorySwap = hc.Memory // no swap beyond the limit
	}
	if n := d.cfg.Limits.MaxProcs; n > 0 {
		pids := int64(n)
		hc.PidsLimit = &pids
	}
	if d.cfg.CPUs > 0 {
		hc.NanoCpus = int64(d.cfg.CPUs * 1e9)
	}
	if t := d.cfg.Limits.CPUTime; t > 0 {
		secs := int64((t + time.Second - 1) / time.Second)
		hc.Ulimits = []dockerUlimit{{Name: "cpu", Soft: secs, Hard: secs}}
	}
	return c
}
