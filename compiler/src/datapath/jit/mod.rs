//! The Cranelift JIT data path: each group of a plan compiled to one
//! native function specialized on its shapes and dtypes.

use super::interp::Interpreter;
use super::{DataPath, ExecError, GroupId, Memory, Plan, RtValue};
use crate::ir::Function;

/// Until groups are compiled, the JIT delegates to the interpreter.
#[derive(Default)]
pub struct Jit {
    fallback: Interpreter,
}

impl Jit {
    pub fn new() -> Jit {
        Jit::default()
    }
}

impl DataPath for Jit {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn prepare(&mut self, func: &Function, plan: &Plan) -> Result<(), String> {
        self.fallback.prepare(func, plan)
    }

    fn run(
        &mut self,
        func: &Function,
        plan: &Plan,
        g: GroupId,
        inputs: &[&RtValue],
        mem: &mut dyn Memory,
    ) -> Result<Vec<RtValue>, ExecError> {
        self.fallback.run(func, plan, g, inputs, mem)
    }
}
