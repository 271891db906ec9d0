"""Python packages as Pulsar's Python runtime takes them: a .zip whose requirements.txt is
pip-installed into the instance's own directory (``--target``, from ``deps/`` offline), and a
wheel as the package itself; pip's failure is a clear error."""

import os
import sys
import zipfile

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.instance_main import load_function
from tests.functions.test_instance import tiny_wheel

FUNCTION = '''
import pulsar
from tinydep import VALUE

class Exclaim(pulsar.Function):
    def process(self, input, context):
        return "%s!%d" % (input, VALUE)
'''


def wheel_with(path: str, files: dict, name: str = "wexclaim") -> None:
    """A pure-Python wheel holding ``files`` (archive name -> text)."""
    info = f"{name}-1.0.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for n, text in files.items():
            archive.writestr(n, text)


class PackageTests(SynchronousTestCase):

    def load(self, path, classname="exclaim.Exclaim"):
        saved_path, saved_modules = list(sys.path), dict(sys.modules)
        try:
            return load_function(path, classname)("hi", None)
        finally:
            sys.path[:] = saved_path
            for name in set(sys.modules) - set(saved_modules):
                del sys.modules[name]

    def directory(self):
        directory = self.mktemp()
        os.makedirs(directory)
        return directory

    def test_requirements_installed_from_deps(self):
        """requirements.txt (comments and blanks ignored) is what gets installed: the wheel it
        names, from deps/, into the package's own site directory."""
        directory = self.directory()
        wheel = os.path.join(directory, "tinydep-1.0-py3-none-any.whl")
        tiny_wheel(wheel)
        path = os.path.join(directory, "exclaim.zip")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("exclaim/src/exclaim.py", FUNCTION)
            archive.write(wheel, "exclaim/deps/tinydep-1.0-py3-none-any.whl")
            archive.writestr("exclaim/requirements.txt", "# the one dependency\n\ntinydep==1.0\n")
        self.assertEqual(self.load(path), "hi!42")
        self.assertTrue(os.path.isfile(os.path.join(directory, "unpacked", "site", "tinydep.py")))

    def test_unsatisfiable_requirements_say_so(self):
        """A requirement pip cannot satisfy fails the load with pip's reason."""
        directory = self.directory()
        path = os.path.join(directory, "exclaim.zip")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("exclaim/src/exclaim.py", FUNCTION)
            archive.writestr("exclaim/deps/README", "no wheels here")
            archive.writestr("exclaim/requirements.txt", "tinydep==9.9\n")
        e = self.assertRaises(RuntimeError, self.load, path)
        self.assertIn("tinydep==9.9", str(e))

    def test_wheel_package(self):
        """A wheel is the package itself: installed beside it, its module imported by name."""
        directory = self.directory()
        path = os.path.join(directory, "wexclaim-1.0-py3-none-any.whl")
        wheel_with(path, {"wexclaim.py": FUNCTION.replace("from tinydep import VALUE", "VALUE = 7")})
        self.assertEqual(self.load(path, "wexclaim.Exclaim"), "hi!7")
