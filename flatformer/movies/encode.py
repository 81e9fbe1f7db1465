"""Streaming movie writers: frames go to the encoder as they are drawn, never held in memory.

MP4 is H.264 through imageio-ffmpeg (its wheel ships ffmpeg). GIF is written by hand around
Pillow's frame encoder, because Pillow (and imageio's Pillow plugin) keep every frame until the
file is closed: here each frame is quantized (256 colours, its own palette) and LZW-encoded as
soon as it is drawn, and its bytes are appended to the file.

Quantizing: Pillow's fast octree (about a tenth of median cut's time a frame)
returns the centres of its colour cells, so white came out as (252, 252, 252). Here white gets
its own palette entry, and one refinement step replaces every other palette colour with the mean
of the pixels mapped to it, so flat colours (the token colours) come out (nearly) exact.

Parallel rendering writes each contiguous range of frames to its own part; `join_mp4` and
`join_gif` then assemble the parts without re-encoding (ffmpeg's concat demuxer; for GIF, the
frames are self-contained blocks, so a file is a header, the parts' bytes and a trailer).
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import numpy as np

from ..errors import FlatformerError

FORMATS = ("mp4", "gif")
WHITE = 255  # the palette index of the background


class Mp4Part:
    """H.264 frames appended to an MP4 file as they come."""

    def __init__(self, path: Path, fps: int):
        import imageio.v2 as imageio

        self.writer = imageio.get_writer(
            str(path),
            format="FFMPEG",
            mode="I",
            fps=fps,
            codec="libx264",
            quality=7,
            macro_block_size=16,
            ffmpeg_log_level="error",
            # as small as "medium" for these flat frames, 3x faster
            output_params=["-preset", "veryfast"],
        )

    def append(self, rgba: np.ndarray):
        self.writer.append_data(rgba)

    def close(self):
        self.writer.close()


class GifPart:
    """GIF frame blocks (graphic control extension, local palette, LZW data) appended to a file;
    no header or trailer, so parts can be concatenated (see `join_gif`)."""

    def __init__(self, path: Path, fps: int):
        self.file = open(path, "wb")
        self.duration = gif_duration(fps)

    def append(self, rgba: np.ndarray):
        from PIL import GifImagePlugin

        frame = quantize(rgba)
        for chunk in GifImagePlugin.getdata(
            frame, duration=self.duration, include_color_table=True
        ):
            self.file.write(chunk)

    def close(self):
        self.file.close()


def quantize(rgba: np.ndarray):
    """A 256-colour Pillow image of an opaque frame `rgba` (H, W, 4): the background white keeps
    an index of its own; the other pixels get octree cells, each palette entry then set to the
    mean colour of its pixels (estimated from every third pixel)."""
    from PIL import Image

    octree = (
        Image.fromarray(rgba, "RGBA")
        .convert("RGB")
        .quantize(255, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    )
    index = np.array(octree)
    index[rgba.view(np.uint32)[..., 0] == 0xFFFFFFFF] = WHITE
    sample, pixels = index.reshape(-1)[::3], rgba.reshape(-1, 4)[::3]
    count = np.bincount(sample, minlength=256)
    sums = np.stack([np.bincount(sample, weights=pixels[:, c], minlength=256) for c in range(3)], 1)
    palette = np.asarray(octree.getpalette(), dtype=np.float64).reshape(-1, 3)[:WHITE]
    palette = np.pad(palette, ((0, 256 - len(palette)), (0, 0)))
    used = count > 0
    palette[used] = sums[used] / count[used, None]
    palette[WHITE] = 255
    frame = Image.fromarray(index, mode="P")
    frame.putpalette(np.rint(palette).astype(np.uint8).tobytes())
    return frame


def gif_duration(fps: int) -> int:
    """Milliseconds per GIF frame: GIF counts in hundredths of a second, so e.g. 30 fps is
    stored as 30 ms (33 fps)."""
    return max(10, round(100 / fps) * 10)


def gif_header(width: int, height: int) -> bytes:
    """GIF89a header with no global palette (every frame has its own) and a loop-forever
    NETSCAPE2.0 extension."""
    screen = b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0)
    loop = b"!\xff\x0bNETSCAPE2.0\x03\x01" + struct.pack("<H", 0) + b"\x00"
    return screen + loop


def join_gif(parts: list[Path], out: Path, width: int, height: int):
    """The GIF file from its parts, in order; the parts are removed."""
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(gif_header(width, height))
        for part in parts:
            with open(part, "rb") as p:
                while chunk := p.read(1 << 20):
                    f.write(chunk)
        f.write(b";")
    os.replace(tmp, out)
    for part in parts:
        part.unlink()


def join_mp4(parts: list[Path], out: Path):
    """The MP4 file from its parts, in order, without re-encoding; the parts are removed."""
    if len(parts) == 1:
        os.replace(parts[0], out)
        return
    import imageio_ffmpeg

    from ..store.write import atomic_write

    listing = out.with_name(out.name + ".parts.txt")
    # The parts by their own names, which ffmpeg reads beside the list: the folder's path (a
    # newline in it would end a line of the list) is never written into it; render names the
    # parts .NAME.partJ.mp4 beside the movie.
    atomic_write(listing, "".join(f"file '{p.name}'\n" for p in parts).encode())
    tmp = out.with_name(out.stem + ".tmp.mp4")
    cmd = [
        imageio_ffmpeg.get_ffmpeg_exe(),
        "-y",
        "-loglevel",
        "error",
        "-f",
        "concat",
        "-safe",
        "0",
        "-i",
        str(listing),
        "-c",
        "copy",
        "-movflags",
        "+faststart",
        str(tmp),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    listing.unlink()
    if result.returncode:
        for path in (tmp, *parts):
            path.unlink(missing_ok=True)
        raise FlatformerError(
            f"ffmpeg could not join the parts of {out.name}: "
            f"{(result.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    os.replace(tmp, out)
    for part in parts:
        part.unlink()


def open_part(fmt: str, path: Path, fps: int):
    return {"mp4": Mp4Part, "gif": GifPart}[fmt](path, fps)
