"""Merging a SavedModel's duplicate graph nodes once, when it is written, rather than at every load.

Tracing leaves many copies of the same computation in each function of an export: a strided slice brings three
`Const`s, `tf.tensordot` (Keras's `Dense` on a 3-D input) recomputes its input's shape, and so on; about half the
nodes of a kmt export are such copies. `tf.saved_model.load` rebuilds every node in Python, and Grappler's common
subgraph elimination removes the copies again at each signature's first call. Merging them in `saved_model.pb`
(the same rule Grappler applies: same op, attributes, device and inputs, and not stateful) shortens both; what the
graph computes is unchanged, bit for bit.
"""

from pathlib import Path

from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry


def merge_duplicate_nodes(directory) -> tuple[int, int]:
    """Rewrites `directory/saved_model.pb` with each function's duplicate stateless nodes merged into one.
    Returns the functions' node count before and after."""
    path = Path(directory) / "saved_model.pb"
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(path.read_bytes())
    before = after = 0
    for meta_graph in saved_model.meta_graphs:
        named = {}  # function -> its nodes that the object graph names (tensors one function captures from another)
        for saved_object in meta_graph.object_graph_def.nodes:
            if saved_object.WhichOneof("kind") == "captured_tensor":
                captured = saved_object.captured_tensor
                named.setdefault(captured.concrete_function, set()).add(_node_name(captured.name))
        for function in meta_graph.graph_def.library.function:
            before += len(function.node_def)
            _merge_function(function, named.get(function.signature.name, set()))
            after += len(function.node_def)
    path.write_bytes(saved_model.SerializeToString())
    return before, after


def _mergeable(node) -> bool:
    """Stateless ops only, and none that carries an internal attribute (colocation, control-flow lowering) that
    names other nodes or changes how it runs."""
    op_def = op_def_registry.get(node.op)  # None for an op this process has not loaded: left alone
    if op_def is None or op_def.is_stateful:
        return False
    return all(not name.startswith("_") or name == "_output_shapes" for name in node.attr)


def _node_name(tensor: str) -> str:
    """`^name`, `name` or `name:output:0` -> `name`."""
    return tensor.lstrip("^").split(":", 1)[0]


def _topological(function) -> list:
    """The function's nodes, each after the nodes it reads (a FunctionDef keeps them in any order)."""
    nodes = {node.name: node for node in function.node_def}
    order, visited = [], set()
    for root in function.node_def:
        stack = [(root.name, False)]
        while stack:
            name, inputs_done = stack.pop()
            if inputs_done:
                order.append(nodes[name])
            elif name not in visited:
                visited.add(name)
                stack.append((name, True))
                stack.extend((_node_name(tensor), False) for tensor in nodes[name].input if _node_name(tensor) in nodes)
    return order


def _merge_function(function, named) -> None:
    """Merges `function`'s duplicate nodes in place, keeping every node in `named` (names the object graph holds)."""
    replaced = {}  # a merged node's name -> the name of the node that stays

    def rename(tensor: str) -> str:
        control = tensor.startswith("^")
        name, colon, rest = tensor.lstrip("^").partition(":")
        return ("^" if control else "") + replaced.get(name, name) + colon + rest

    kept = {}
    for node in _topological(function):
        inputs = [rename(tensor) for tensor in node.input]
        node.ClearField("input")
        node.input.extend(inputs)
        if node.name in named or not _mergeable(node):
            continue
        data = tuple(tensor for tensor in inputs if not tensor.startswith("^"))
        control = tuple(sorted({tensor for tensor in inputs if tensor.startswith("^")}))
        attrs = tuple(
            (name, value.SerializeToString(deterministic=True))
            for name, value in sorted(node.attr.items())
            if name != "_output_shapes"
        )
        key = (node.op, node.device, data, control, attrs)
        if key in kept:
            replaced[node.name] = kept[key]
        else:
            kept[key] = node.name
    if not replaced:
        return
    remaining = [node for node in function.node_def if node.name not in replaced]
    function.ClearField("node_def")
    function.node_def.extend(remaining)
    for outputs in (function.ret, function.control_ret):
        for name, tensor in list(outputs.items()):
            outputs[name] = rename(tensor)
