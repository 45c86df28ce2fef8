"""Reading parallel text: round trip, every error names file and line, gzip, line counts."""

import gzip

import pytest

from train.data.files import (count_lines, iter_lines, multi30k_paths, newstest_paths, peak_rss_bytes, read_parallel,
                        output_writer, shared_data_dir, write_new)
from train.errors import InputError

SRC = ["one red apple is on the table", "two books are in the box", "", "Grüße aus Köln",
       "three   cups", "a b c d e f g h i j"]
TGT = ["ein roter Apfel liegt auf dem Tisch", "zwei Bücher liegen in der Kiste", "leer",
       "Grüße aus Köln: ß ä ö ü", "", "x y"]


def write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def pair_files(tmp_path):
    return write(tmp_path / "c.en", SRC), write(tmp_path / "c.de", TGT)


def test_read_parallel_round_trip_skips_empty(pair_files):
    pairs, stats = read_parallel(*pair_files)
    expected = [(s.strip(), t.strip()) for s, t in zip(SRC, TGT) if s and t]
    assert pairs == expected
    assert (stats.n_lines, stats.n_empty, stats.n_too_long, stats.n_kept) == (6, 2, 0, 4)


def test_read_parallel_length_filter_counts_drops(pair_files):
    pairs, stats = read_parallel(*pair_files, max_len=7)
    assert [s for s, _ in pairs] == SRC[:2] + [SRC[3]]  # 10-word source dropped
    assert (stats.n_empty, stats.n_too_long, stats.n_kept) == (2, 1, 3)
    _, stats_chars = read_parallel(*pair_files, max_len=30, count_tokens=len)
    assert stats_chars.n_too_long == 2  # 'ein roter Apfel liegt auf dem Tisch' is 34 characters


def test_gzip_reads_the_same(tmp_path, pair_files):
    src_gz = write(tmp_path / "c.en.gz", SRC, gz=True)
    tgt_gz = write(tmp_path / "c.de.gz", TGT, gz=True)
    assert read_parallel(src_gz, tgt_gz) == read_parallel(*pair_files)


def test_crlf_and_whitespace_are_stripped(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(b"  hello world \r\nzwei\r\n")
    assert list(iter_lines(path)) == [(1, "hello world"), (2, "zwei")]


def test_different_line_counts_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "a.en", ["x"] * 5)
    tgt = write(tmp_path / "a.de", ["y"] * 3)
    with pytest.raises(InputError) as err:
        read_parallel(src, tgt)
    message = str(err.value)
    assert "a.en has 5 lines" in message and "a.de has 3" in message and "\n" not in message


def test_empty_file(tmp_path):
    src = write(tmp_path / "e.en", ["x"])
    tgt = tmp_path / "e.de"
    tgt.write_bytes(b"")
    with pytest.raises(InputError, match=r"e\.de: empty file"):
        read_parallel(src, tgt)


@pytest.mark.parametrize("gz", [False, True])
def test_non_utf8_reports_file_and_line(tmp_path, gz):
    data = "eins\nzwei\n".encode() + b"dr\xe9i\n" + b"vier\n"  # latin-1 'é' on line 3
    bad = tmp_path / ("bad.de.gz" if gz else "bad.de")
    bad.write_bytes(gzip.compress(data) if gz else data)
    src = write(tmp_path / "ok.en", ["a", "b", "c", "d"])
    with pytest.raises(InputError, match=r"bad\.de(\.gz)?:3: not valid UTF-8$"):
        read_parallel(src, bad)


def test_missing_file(tmp_path):
    src = write(tmp_path / "ok.en", ["a"])
    with pytest.raises(InputError, match=r"missing\.de: file not found"):
        read_parallel(src, tmp_path / "missing.de")


def test_not_gzip_named_gz(tmp_path):
    fake = tmp_path / "fake.en.gz"
    fake.write_bytes(b"plain text\n")
    with pytest.raises(InputError, match="fake.en.gz"):
        list(iter_lines(fake))


@pytest.mark.parametrize("content", [b"", b"a\n", b"a\nb", b"a\n\nb\n", b"\n\n"])
@pytest.mark.parametrize("gz", [False, True])
def test_count_lines_agrees_with_iter_lines(tmp_path, content, gz):
    path = tmp_path / ("f.txt.gz" if gz else "f.txt")
    path.write_bytes(gzip.compress(content) if gz else content)
    assert count_lines(path, block=1) == count_lines(path) == len(list(iter_lines(path)))


def test_peak_rss_is_plausible():
    assert 10 * 2**20 < peak_rss_bytes() < 64 * 2**30


def test_shared_data_paths_or_skip():
    root = shared_data_dir()
    if root is None:
        with pytest.raises(InputError, match="shared data not found"):
            multi30k_paths("train")
        pytest.skip("../shared/data absent")
    with pytest.raises(InputError, match="unknown Multi30k split"):
        multi30k_paths("dev")
    with pytest.raises(InputError, match="no newstest1999"):
        newstest_paths(1999)


@pytest.mark.parametrize("split, n",
                         [("train", 29_000), ("val", 1_014), ("test_2016_flickr", 1_000)])
def test_real_multi30k_line_counts(split, n):
    if shared_data_dir() is None or not (shared_data_dir() / "multi30k").is_dir():
        pytest.skip("Multi30k not in ../shared/data")
    src, tgt = multi30k_paths(split)
    assert src.name == f"{split}.en.gz" and tgt.name == f"{split}.de.gz"
    pairs, stats = read_parallel(src, tgt)
    assert stats.n_lines == n and stats.n_kept + stats.n_empty == n
    if split == "train":
        assert any("ä" in de or "ü" in de or "ß" in de for _, de in pairs[:200])


def test_real_newstest2014_is_the_full_set():
    if shared_data_dir() is None or not (shared_data_dir() / "wmt_newstest").is_dir():
        pytest.skip("WMT newstest not in ../shared/data")
    _, stats = read_parallel(*newstest_paths(2014))
    assert stats.n_lines == 3003  # §6.1 evaluates on the full newstest2014


@pytest.mark.parametrize("hard_links", [True, False])
def test_write_new_writes_a_new_file_whole_and_never_over_one(tmp_path, monkeypatch, hard_links):
    """A new file gets the bytes; an existing one stays as it was (FileExistsError); no temporary is left,
    where the file system has hard links and where it has none (an exclusive create then)."""
    if not hard_links:
        def no_links(src, dst):
            raise PermissionError("hard links not supported")
        monkeypatch.setattr("os.link", no_links)
    write_new(tmp_path / "new.txt", b"ours")
    (tmp_path / "users.txt").write_bytes(b"the user's")
    with pytest.raises(FileExistsError):
        write_new(tmp_path / "users.txt", b"ours")
    assert (tmp_path / "new.txt").read_bytes() == b"ours" and (tmp_path / "users.txt").read_bytes() == b"the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "users.txt"]


@pytest.mark.parametrize("force", [False, True])
def test_output_writer_never_leaves_a_short_file_under_the_name(tmp_path, force):
    """Lines go to a temporary beside the file as they come; the name gets them only once all are written, so
    a run stopped half-way (an error, Ctrl-C, a kill) leaves no truncated file that looks complete, and with
    --force the file that was there stays whole until the new one is."""
    out = tmp_path / "out.txt"
    if force:
        out.write_text("the old translations\n")
    with pytest.raises(RuntimeError):
        with output_writer(out, force) as write:
            write("line 1\n")
            assert not out.exists() or out.read_text() == "the old translations\n"
            raise RuntimeError("a failure half-way")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out.txt"] if force else [])
    assert not force or out.read_text() == "the old translations\n"
    with pytest.raises(KeyboardInterrupt), pytest.warns(UserWarning, match="not written .interrupted.; the lines"):
        with output_writer(out, force) as write:
            write("line 1\n")
            raise KeyboardInterrupt  # stdin translated until Ctrl-C: the lines done stay, in the temporary
    kept = [p for p in tmp_path.iterdir() if p.name != "out.txt"]
    assert len(kept) == 1 and kept[0].read_text() == "line 1\n" and ".tmp-" in kept[0].name
    kept[0].unlink()
    assert not force or out.read_text() == "the old translations\n"
    with output_writer(out, force) as write:
        write("line 1\n")
        partial = [p for p in tmp_path.iterdir() if p.name != "out.txt"]
        assert len(partial) == 1 and partial[0].read_text() == "line 1\n"  # written as it comes, beside it
        write("line 2\n")
    assert out.read_text() == "line 1\nline 2\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_output_writer_keeps_a_file_that_appeared_meanwhile_and_the_lines(tmp_path):
    out = tmp_path / "out.txt"
    with pytest.raises(InputError, match="appeared while writing") as err:
        with output_writer(out, False) as write:
            write("ours\n")
            out.write_text("the user's")
    assert out.read_text() == "the user's"
    kept = [p for p in tmp_path.iterdir() if p.name != "out.txt"]
    assert len(kept) == 1 and kept[0].read_text() == "ours\n" and str(kept[0]) in str(err.value)


def test_a_folder_where_a_file_belongs_is_named_as_a_folder(tmp_path):
    """`--input DIR` said 'file not found'; `--output DIR --force` said 'exists; pass --force'."""
    from train.evaluate.translate import read_source

    for read in (lambda p: list(iter_lines(p)), count_lines, read_source):
        with pytest.raises(InputError, match=r": a folder, not a file$"):
            read(tmp_path)
    with pytest.raises(InputError, match=r": a folder, not a file; choose a file to write"):
        with output_writer(tmp_path, True):
            pass
