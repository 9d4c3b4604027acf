//! Building a [`Function`]: a cursor over nested regions, appending
//! instructions in program order. Lowering drives it; it checks nothing
//! (the verifier does, afterwards).

use super::*;
use crate::span::Loc;

pub struct Builder {
    func: Function,
    /// Regions being filled, innermost last.
    cursor: Vec<Region>,
}

impl Builder {
    pub fn new(name: &str, constexprs: Vec<(String, crate::sema::Konst)>) -> Builder {
        let mut regions = PrimaryMap::new();
        let body = regions.push(RegionData::default());
        Builder {
            func: Function {
                name: name.to_string(),
                params: Vec::new(),
                constexprs,
                values: PrimaryMap::new(),
                insts: PrimaryMap::new(),
                regions,
                body,
            },
            cursor: vec![body],
        }
    }

    pub fn func(&self) -> &Function {
        &self.func
    }

    pub fn ty(&self, v: Value) -> &Type {
        &self.func.values[v].ty
    }

    /// Adds a kernel parameter (a parameter of the body region).
    pub fn add_param(&mut self, name: &str, ty: Type) -> Value {
        let v = self.func.values.push(ValueData { ty: ty.clone() });
        let body = self.func.body;
        self.func.regions[body].params.push(v);
        self.func.params.push(Param {
            name: name.to_string(),
            ty,
            value: v,
        });
        v
    }

    /// A new, empty region with parameters of the given types.
    pub fn new_region(&mut self, param_tys: &[Type]) -> (Region, Vec<Value>) {
        let params: Vec<Value> = param_tys
            .iter()
            .map(|t| self.func.values.push(ValueData { ty: t.clone() }))
            .collect();
        let r = self.func.regions.push(RegionData {
            params: params.clone(),
            insts: Vec::new(),
        });
        (r, params)
    }

    pub fn current(&self) -> Region {
        *self.cursor.last().unwrap_or(&self.func.body)
    }

    pub fn enter(&mut self, r: Region) {
        self.cursor.push(r);
    }

    pub fn leave(&mut self) {
        if self.cursor.len() > 1 {
            self.cursor.pop();
        }
    }

    /// Whether region `r` already ends in a terminator.
    pub fn is_terminated(&self, r: Region) -> bool {
        self.func.regions[r]
            .insts
            .last()
            .is_some_and(|&i| self.func.insts[i].op.is_terminator())
    }

    /// Appends an instruction to region `r`.
    pub fn push_to(
        &mut self,
        r: Region,
        op: Op,
        args: Vec<Value>,
        result_tys: Vec<Type>,
        regions: Vec<Region>,
        loc: Loc,
    ) -> (Inst, Vec<Value>) {
        let results: Vec<Value> = result_tys
            .iter()
            .map(|t| self.func.values.push(ValueData { ty: t.clone() }))
            .collect();
        let is_block = result_tys.first().is_some_and(Type::is_block)
            || (result_tys.is_empty() && args.first().is_some_and(|a| self.func.values[*a].ty.is_block()));
        let engine = engine_of(&op, is_block);
        let inst = self.func.insts.push(InstData {
            op,
            args,
            results: results.clone(),
            regions,
            engine,
            loc,
        });
        self.func.regions[r].insts.push(inst);
        (inst, results)
    }

    /// Appends an instruction at the cursor.
    pub fn push(
        &mut self,
        op: Op,
        args: Vec<Value>,
        result_tys: Vec<Type>,
        regions: Vec<Region>,
        loc: Loc,
    ) -> (Inst, Vec<Value>) {
        let r = self.current();
        self.push_to(r, op, args, result_tys, regions, loc)
    }

    /// Appends a one-result instruction at the cursor.
    pub fn value(&mut self, op: Op, args: Vec<Value>, ty: Type, loc: Loc) -> Value {
        let (_, results) = self.push(op, args, vec![ty], vec![], loc);
        results[0]
    }

    /// How many instructions the cursor's region holds: a mark for
    /// [`Self::effectful_since`] and [`Self::move_since`].
    pub fn mark(&self) -> usize {
        self.func.regions[self.current()].insts.len()
    }

    /// Whether an instruction appended to the cursor's region since `mark`
    /// has an effect or may fail (see [`Op::is_pure_and_infallible`]).
    pub fn effectful_since(&self, mark: usize) -> bool {
        let insts = &self.func.regions[self.current()].insts;
        insts
            .get(mark..)
            .unwrap_or_default()
            .iter()
            .any(|&i| !self.func.insts[i].op.is_pure_and_infallible())
    }

    /// Moves the instructions appended to the cursor's region since `mark`
    /// to the end of region `r` (the branch of an `if` made after they
    /// were lowered). Nothing else refers to their results yet.
    pub fn move_since(&mut self, mark: usize, r: Region) {
        let cur = self.current();
        let len = self.func.regions[cur].insts.len();
        let moved = self.func.regions[cur].insts.split_off(mark.min(len));
        self.func.regions[r].insts.extend(moved);
    }

    /// Drops the instructions appended to the cursor's region since
    /// `mark` (an operand that turned out not to run: the right of `False
    /// and …`). They stay in the arena, reached from no region.
    pub fn discard_since(&mut self, mark: usize) {
        let cur = self.current();
        self.func.regions[cur].insts.truncate(mark);
    }

    /// Gives an instruction created without results (an `if`, whose
    /// results are known once both branches are lowered) its results.
    pub fn set_results(&mut self, inst: Inst, tys: Vec<Type>) -> Vec<Value> {
        let results: Vec<Value> = tys
            .into_iter()
            .map(|t| self.func.values.push(ValueData { ty: t }))
            .collect();
        self.func.insts[inst].results = results.clone();
        results
    }

    pub fn finish(self) -> Function {
        self.func
    }
}
