"""What is called: the cases (operands), the ops (statements), the registry that names them."""
