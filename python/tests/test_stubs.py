"""The .pyi stubs shipped with homodyne_cpp list exactly its public names, with its signatures."""
import ast
import inspect
import pathlib
import re

import homodyne_cpp as hc

STUB = pathlib.Path(hc.__file__).with_name("__init__.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_definitions():
    """Top-level public names of the stub: {name: ast node}."""
    names = {}
    for node in stub_tree().body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return {name: node for name, node in names.items()
            if not name.startswith("_") or name == "__version__"}


def module_public_names():
    return {name for name in dir(hc)
            if (not name.startswith("_") or name == "__version__")
            and not inspect.ismodule(getattr(hc, name))}


def test_the_stub_ships_beside_the_module():
    assert STUB.exists()
    assert STUB.with_name("py.typed").exists()


def test_stub_and_module_have_the_same_public_names():
    assert set(stub_definitions()) == module_public_names()
    assert set(hc.__all__) == module_public_names()


def parameters_of_stub(function):
    """[(name, kind, default source or None)] of a stub function."""
    arguments = function.args
    result = []
    positional = arguments.posonlyargs + arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + arguments.defaults
    for argument, default in zip(positional, defaults):
        result.append((argument.arg, "positional",
                       None if default is None else ast.literal_eval(default)))
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        result.append((argument.arg, "keyword",
                       None if default is None else ast.literal_eval(default)))
    return result


def parameters_of(function):
    try:
        signature = inspect.signature(function)
    except ValueError:  # a pybind11 function: its signature is the docstring's first line
        first_line = function.__doc__.splitlines()[0]
        names = re.findall(r"(\w+):", first_line[first_line.index("("):])
        return [(name, "positional", None) for name in names]
    result = []
    for parameter in signature.parameters.values():
        kind = "keyword" if parameter.kind == parameter.KEYWORD_ONLY else "positional"
        default = None if parameter.default is parameter.empty else parameter.default
        result.append((parameter.name, kind, default))
    return result


def test_functions_have_the_stub_signatures():
    for name, node in stub_definitions().items():
        if isinstance(node, ast.FunctionDef):
            assert parameters_of(getattr(hc, name)) == parameters_of_stub(node), name


def test_classes_have_the_stub_members_and_bases():
    for name, node in stub_definitions().items():
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(hc, name)
        stubbed = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        public = {member for member in vars(cls)
                  if not member.startswith("_") or member == "_repr_html_"}
        assert stubbed == public, name
        bases = [ast.unparse(base) for base in node.bases]
        if bases:
            assert [base.__name__ for base in cls.__bases__] == bases, name
